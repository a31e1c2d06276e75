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

import threading
from dataclasses import dataclass
from itertools import chain, starmap

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


WIDTH = len(COLUMNS)


class Timeline:
    """An append-only list of rows; a runtime records into it, reports read it.

    Rows are kept flat: one list of their values, :data:`COLUMNS` after :data:`COLUMNS`
    (recording is on a simulation's hot path: hundreds of thousands of rows a run, and a
    tuple kept per row was an object for the cyclic collector to count and scan, up to
    40% of a young collection's; the values are strs, ints and floats, which it does not
    track). Invariant: its length is a multiple of :data:`WIDTH` whenever another thread
    can look (one ``extend`` a row or a batch of rows). :attr:`rows` builds their
    :class:`TimelineRow` values on first read, and keeps them (one list, extended in
    place as rows arrive; under a lock, as threads that record may read too);
    :meth:`as_tuples` builds tuples. Either view holds the same rows in the same order."""

    def __init__(self) -> None:
        self._flat: list = []
        self._rows: list[TimelineRow] = []
        self._building = threading.Lock()  # two readers never build the same rows twice

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
        self._flat.extend((lane, op, batch, request, layer, start, end, int(nbytes), steps))

    def record_rows(self, rows: list[tuple]) -> None:
        """Append ``rows``, tuples in :data:`COLUMNS` order as :meth:`record` builds them
        (``nbytes`` an int, ``end >= start``: the caller built them so; not checked)."""
        self._flat.extend(chain.from_iterable(rows))

    def _tuples(self, first: int = 0) -> list[tuple]:
        """Rows ``first`` onwards, as tuples (from one copy of the values: a row another
        thread records meanwhile is in it whole or not at all)."""
        it = iter(self._flat[first * WIDTH:])
        return list(zip(*[it] * WIDTH, strict=True))

    @property
    def rows(self) -> list[TimelineRow]:
        """The rows recorded so far, as values (read-only: record to add one)."""
        rows = self._rows
        if len(rows) < len(self):
            with self._building:
                rows.extend(starmap(TimelineRow, self._tuples(len(rows))))
        return rows

    def __len__(self) -> int:
        return len(self._flat) // WIDTH

    def as_tuples(self) -> list[tuple]:
        """The rows as tuples in :data:`COLUMNS` order."""
        return self._tuples()

    def __getstate__(self) -> dict:  # a timeline crossing a process sends its values once
        return {"_flat": self._flat}

    def __setstate__(self, state: dict) -> None:
        if "_flat" in state:
            self._flat = state["_flat"]
        else:  # pickled when rows were kept as tuples
            self._flat = list(chain.from_iterable(state["_tuples"]))
        self._rows = []
        self._building = threading.Lock()
