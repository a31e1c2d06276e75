"""The simulated runtime's write-back under a policy (:mod:`hicache.runtime.writeback`).

    compute N done ──> d2h stream: gate -> chunk -> gate -> chunk ... -> completions

A chunked policy copies a batch's backups chunk by chunk on the d2h stream (so batches'
backups stay in order), asking the policy before each chunk; a gate may wait a gap and
for the H2D loads in flight. The runtime reports each finished compute batch to
:meth:`Writeback.step_done`, with whether a chunk ran beside it. ``none`` keeps the one
all-layer copy per batch (:func:`sim.ops.backup_op`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import islice, repeat
from typing import TYPE_CHECKING

from hicache.runtime.writeback import ChunkLog, WritebackConfig, WritebackPolicy, make_policy
from sim.batch import BatchState
from sim.ops import Proc, _start, backups_done

if TYPE_CHECKING:
    from sim.runtime import SimRuntime


class _FoldRun:
    """A fold's observed steps, kept as one record: batch ``first + k`` ran from
    ``starts[k]`` to ``ends[k]`` (``len(starts) == len(ends) > 0``) with ``decode``
    requests."""

    __slots__ = ("first", "starts", "ends", "decode")

    def __init__(self, first: int, starts: Sequence[float], ends: Sequence[float],
                 decode: int) -> None:
        self.first, self.starts, self.ends, self.decode = first, starts, ends, decode


class Writeback:
    """A runtime's write-back policy and what it has seen of chunks and steps.

    Invariant: :attr:`steps` and :attr:`ends` are what :meth:`step_done` per step would
    have built. Reports are logged as they come (a step: ``(start, end, decode batch,
    batch id)``; a fold: one :class:`_FoldRun`) and expanded into per-step rows only when
    read (the default policy reads none of them)."""

    def __init__(self, cfg: WritebackConfig | str | None) -> None:
        self.policy: WritebackPolicy = make_policy(cfg)
        self.chunks = ChunkLog()
        self._log: list[tuple[float, float, int, int] | _FoldRun] = []
        self._steps: list[tuple[float, float, int]] = []  # expanded from _log[:_expanded]
        self._ends: dict[int, float] = {}
        self._expanded = 0

    @property
    def steps(self) -> list[tuple[float, float, int]]:
        """(start, end, decode batch or 0) per reported step, in report order."""
        self._expand()
        return self._steps

    @property
    def ends(self) -> dict[int, float]:
        """Batch id -> when its compute completed (the latest report of that id)."""
        self._expand()
        return self._ends

    def last_step(self) -> tuple[float, float] | None:
        """(start, end) of the last reported step (``steps[-1][:2]``), None before any."""
        if not self._log:
            return None
        last = self._log[-1]
        if type(last) is tuple:
            return last[0], last[1]
        return last.starts[-1], last.ends[-1]  # type: ignore[union-attr]

    def _expand(self) -> None:
        log, done = self._log, self._expanded
        if done == len(log):
            return
        steps, ends = self._steps, self._ends
        for entry in islice(log, done, None):
            if type(entry) is tuple:
                start, end, decode, batch = entry
                steps.append((start, end, decode))
                ends[batch] = end
            else:
                run: _FoldRun = entry  # type: ignore[assignment]
                steps.extend(zip(run.starts, run.ends, repeat(run.decode), strict=False))
                ends.update(zip(range(run.first, run.first + len(run.ends)), run.ends,
                                strict=True))
        self._expanded = len(log)

    def step_done(self, batch: int, start: float, end: float, decode_batch: int) -> None:
        self._log.append((start, end, decode_batch, batch))
        if type(self.policy) is not WritebackPolicy:  # none's observe_step does nothing
            self.policy.observe_step(end, decode_batch, end - start,
                                     self.chunks.overlap(start, end))

    def steps_done(self, first: int, starts: Sequence[float], ends: Sequence[float],
                   decode_batch: int) -> None:
        """:meth:`step_done` of batches ``first, first + 1, ...`` from ``starts[k]`` to
        ``ends[k]`` (a fold's steps): one record under ``none``, which observes nothing.
        The sequences are kept: the caller never mutates them."""
        if type(self.policy) is not WritebackPolicy:
            for k, (start, end) in enumerate(zip(starts, ends, strict=True)):
                self.step_done(first + k, start, end, decode_batch)
            return
        if len(starts) != len(ends):
            raise ValueError(f"{len(starts)} starts for {len(ends)} ends")
        if ends:
            self._log.append(_FoldRun(first, starts, ends, decode_batch))


def chunked_backup_op(rt: SimRuntime, st: BatchState, ready: dict[str, float]) -> Proc:
    """A batch's backups in chunks under ``rt.writeback``'s policy (after its compute,
    which set ``ready["t"]``); copy calls split evenly over the chunks."""
    wb, env = rt.writeback, rt.env
    payload = sum(b.dst.num_pages * rt.bytes_per_page[b.intent.src.pool] for b in st.backups)
    calls = rt.backup_calls(st)
    bid, t_ready = st.plan.batch_id, ready.get("t", env.now)
    n = max(1, math.ceil(payload / wb.policy.cfg.chunk_bytes))
    for i in range(n if payload else 0):
        h2d = rt.streams["h2d"]
        gate = wb.policy.gate(env.now, t_ready, not h2d.idle())
        if gate.wait_s > 0:
            yield env.timeout(gate.wait_s)
        if gate.after_loads and not h2d.idle():
            yield env.any_of([h2d.tail, env.timeout(gate.loads_s)])
        nbytes = payload // n + (payload % n if i == n - 1 else 0)
        k = max(1, calls // n)
        yield from _start(rt, [], woken=i == 0)  # the first chunk's worker waited for compute
        t0 = env.now
        wb.chunks.started(t0)
        start, end = yield from rt.copies.copy("d2h", nbytes, k, op="backup", batch=bid)
        wb.chunks.ended(t0, end)
        wb.policy.chunk_done(end, nbytes, end - t0)
        rt.timeline.record("d2h", "backup", t0, end, batch=bid, nbytes=nbytes)
        rt.timeline.record("pcie:d2h", "backup", start, end, batch=bid, nbytes=nbytes)
    backups_done(rt, st)
