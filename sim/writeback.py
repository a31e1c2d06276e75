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
from itertools import repeat
from typing import TYPE_CHECKING

from hicache.runtime.writeback import ChunkLog, WritebackConfig, WritebackPolicy, make_policy
from sim.batch import BatchState
from sim.ops import Proc, _start, backups_done

if TYPE_CHECKING:
    from sim.runtime import SimRuntime


class Writeback:
    """A runtime's write-back policy and what it has seen of chunks and steps."""

    def __init__(self, cfg: WritebackConfig | str | None) -> None:
        self.policy: WritebackPolicy = make_policy(cfg)
        self.chunks = ChunkLog()
        self.steps: list[tuple[float, float, int]] = []  # (start, end, decode batch or 0)
        self.ends: dict[int, float] = {}  # batch id -> when its compute completed

    def step_done(self, batch: int, start: float, end: float, decode_batch: int) -> None:
        self.steps.append((start, end, decode_batch))
        self.ends[batch] = end
        self.policy.observe_step(end, decode_batch, end - start,
                                 self.chunks.overlap(start, end))

    def steps_done(self, first: int, starts: Sequence[float], ends: Sequence[float],
                   decode_batch: int) -> None:
        """:meth:`step_done` of batches ``first, first + 1, ...`` from ``starts[k]`` to
        ``ends[k]`` (a fold's steps): in one pass under ``none``, which observes nothing
        (no chunks)."""
        if type(self.policy) is not WritebackPolicy or self.chunks.recent:
            for k, (start, end) in enumerate(zip(starts, ends, strict=True)):
                self.step_done(first + k, start, end, decode_batch)
            return
        self.steps.extend(zip(starts, ends, repeat(decode_batch), strict=False))  # repeat: endless
        self.ends.update(zip(range(first, first + len(ends)), ends, strict=True))


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
