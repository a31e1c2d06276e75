"""What the runtime remembers about a prepared batch between prepare and execute.

Invariant: ``layer_events[i]`` fires when layer i of every load in the batch is on the
device; ``loads_done`` fires when all of them are (None: the batch loads nothing);
``load_issued[g]`` when the host issued load op g's first copy call (None: at prepare,
no host lane modelled), ``landed`` replaces ``layer_events`` and ``loads_done`` when the
loads run chained (:mod:`sim.load_chain`), ``launched[i]`` when
it launched compute op i (None: no host lane modelled).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy

from hicache.runtime.handles import CacheExtentRef
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    PreparedBatchHandle,
    PreparedSlice,
)
from hicache.runtime.page_ids import Run
from hicache.runtime.slot_init import slot_builder, slot_init

if TYPE_CHECKING:
    from sim.load_chain import Landed

# What the runtime builds per batch, extent and slice, at slot speed (slot_builder:
# ARCHITECTURE.md); the same values as the classes' constructors.
build_handle = slot_builder(PreparedBatchHandle)
build_completion = slot_builder(BatchCompletion)
build_extent = slot_builder(CacheExtentRef)
build_slice = slot_builder(PreparedSlice)


@dataclass(slots=True)
class PendingBackup:
    intent: BackupIntent
    dst: CacheExtentRef
    src_runs: list[Run]  # the pages copied, as runs (start, length)
    dst_runs: list[Run]
    done: simpy.Event


@slot_init
@dataclass(frozen=True, slots=True)
class LoadGroup:
    """One h2d op: the layers it moves, its bytes and copy calls (frozen: a runtime
    shares one batch's groups with every batch that loads the same, ``Transfers.load_groups``)."""

    layers: range
    nbytes: int
    calls: int


# what a chain's steps read of a batch's load groups (group_steps): per group, the
# kernel's work and the landing's (row layer, int bytes, bytes, layers landed, next group);
# and the last group with bytes
GroupSteps = tuple[list[float], list[tuple[int, int, int, int, int]], int]


def group_steps(groups: Sequence[LoadGroup]) -> GroupSteps:
    """What a chain's steps read of its groups, per group g: its kernel's work
    (``float(nbytes)``) and its landing's (the layer of its rows or -1, ``int(nbytes)``,
    ``nbytes``, the layers landed then and the next group: the groups without bytes
    after g land with it); and the last group with bytes (-1: none). The runtime computes
    it once per shared tuple of groups (``Transfers.load_groups``: ``load_steps``)."""
    n = len(groups)
    work: list[float] = []
    lands: list[tuple[int, int, int, int, int]] = []
    last = -1
    for g, group in enumerate(groups):
        nbytes, layers = group.nbytes, group.layers
        if nbytes:
            last = g
        nxt, count = g + 1, layers.stop
        while nxt < n and not groups[nxt].nbytes:
            count = groups[nxt].layers.stop
            nxt += 1
        work.append(float(nbytes))
        lands.append((layers.start if len(layers) == 1 else -1, int(nbytes), nbytes, count,
                      nxt))
    return work, lands, last


@dataclass(slots=True)
class BatchState:
    """A prepared batch. The lists a batch without backups or loads leaves empty default
    to one shared empty tuple (never appended to: prepare assigns them)."""

    plan: BatchPlan
    handle: PreparedBatchHandle
    generation: int
    prefills: list[tuple[int, int]] = field(default_factory=list)  # (new, context) chunks
    decodes: list[int] = field(default_factory=list)  # contexts of decode slices
    finished: tuple[int, ...] = ()
    layer_events: list[simpy.Event] | None = None
    loads_done: simpy.Event | None = None
    backups: Sequence[PendingBackup] = ()
    extra_s: float = 0.0  # state copies (MAMBA checkpoints, copy-on-write) added to compute
    load_groups: Sequence[LoadGroup] = ()
    load_steps: GroupSteps | None = None  # group_steps(load_groups), shared as they are
    load_issued: Sequence[simpy.Event | None] = ()  # None: at once
    load_issue_end: Sequence[float] = ()
    launched: list[simpy.Event] | None = None
    landed: Landed | None = None  # chained loads (sim.load_chain) instead of layer_events


class BatchShapes(Mapping[int, dict[str, int]]):
    """Batch id -> what the batch computed (``requests``, ``tokens``, ``context_tokens``,
    ``load_bytes``). A prepared batch is kept as one tuple of those four (:attr:`rows`,
    read as a dict); a folded decode run (sim.fold) is stored as one segment and read
    as its batches: batch ``first + k`` holds ``requests`` decode tokens at
    ``context_tokens + k * requests`` in all."""

    KEYS = ("requests", "tokens", "context_tokens", "load_bytes")

    def __init__(self) -> None:
        # batch id -> (requests, tokens, context_tokens, load_bytes): Accounting writes it
        self.rows: dict[int, tuple[int, int, int, int]] = {}
        self._runs: dict[int, tuple[int, int, int]] = {}  # first id -> (n, requests, ctx)

    def __setitem__(self, batch_id: int, shape: Mapping[str, int]) -> None:
        self.rows[batch_id] = (shape["requests"], shape["tokens"], shape["context_tokens"],
                               shape["load_bytes"])

    def add_decode_run(self, first: int, n: int, requests: int, context_tokens: int) -> None:
        """Batches ``first .. first + n - 1``: decode steps of the same requests."""
        self._runs[first] = (n, requests, context_tokens)

    def __getitem__(self, batch_id: int) -> dict[str, int]:
        row = self.rows.get(batch_id)
        if row is not None:
            return dict(zip(self.KEYS, row, strict=True))
        for first, (n, requests, ctx) in self._runs.items():
            if first <= batch_id < first + n:
                return {"requests": requests, "tokens": requests,
                        "context_tokens": ctx + (batch_id - first) * requests, "load_bytes": 0}
        raise KeyError(batch_id)

    def __iter__(self) -> Iterator[int]:
        ids = set(self.rows)
        for first, (n, _, _) in self._runs.items():
            ids.update(range(first, first + n))
        return iter(sorted(ids))

    def __len__(self) -> int:
        return sum(1 for _ in self)
