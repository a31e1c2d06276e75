"""One timeline schema for predicted (simulator) and measured (torch backend) runs.

Each row is one operation on one lane::

    lane       op            batch  request  layer  start    end      bytes      steps
    compute    prefill       12     -1       3      0.0104   0.0109   0          1
    h2d        load          12     -1       4      0.0101   0.0106   8388608    1
    d2h        backup        11     -1       -1     0.0099   0.0121   33554432   1
    compute    decode        13     -1       -1     0.0121   0.2533   0          40

Lanes name streams and engines: ``compute``, ``h2d``, ``d2h`` (CUDA streams),
``ce:h2d``, ``ce:d2h`` (copy engines), ``pcie:h2d``, ``pcie:d2h`` (links), ``l3`` (storage
I/O; failed attempts as ``get_timeout``, ``put_error``, ...), ``cpu`` (scheduler steps),
``fault`` (the simulator's injected faults: op = kind, batch = index in ``faults:``).
``-1`` means "not applicable". Times are seconds from the run's start on the runtime's
clock. ``steps`` > 1: the simulator folded that many decode batches (``batch`` ..
``batch + steps - 1``, back to back) into one row (:mod:`sim.fold`). Rows become a pandas
DataFrame, a Chrome/Perfetto trace and plots in :mod:`hicache.report`, so predicted and
measured runs compare row for row.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

COLUMNS = ("lane", "op", "batch", "request", "layer", "start", "end", "bytes", "steps")


@dataclass(frozen=True, slots=True)
class TimelineRow:
    lane: str
    op: str
    batch: int
    request: int
    layer: int
    start: float
    end: float
    bytes: int
    steps: int = 1

    @property
    def duration(self) -> float:
        return self.end - self.start


class Timeline:
    """An append-only list of rows; a runtime records into it, reports read it."""

    def __init__(self) -> None:
        self.rows: list[TimelineRow] = []

    def record(
        self,
        lane: str,
        op: str,
        start: float,
        end: float,
        *,
        batch: int = -1,
        request: int = -1,
        layer: int = -1,
        nbytes: int = 0,
        steps: int = 1,
    ) -> None:
        if end < start:
            raise ValueError(f"timeline row on {lane!r} ends ({end}) before it starts ({start})")
        self.rows.append(TimelineRow(lane, op, batch, request, layer, start, end, int(nbytes),
                                     steps))

    def __len__(self) -> int:
        return len(self.rows)

    def as_tuples(self) -> list[tuple]:
        return [astuple(r) for r in self.rows]
