"""What the runtime remembers about a prepared batch between prepare and execute.

Invariant: ``layer_events[i]`` fires when layer i of every load in the batch is on the
device; ``loads_done`` fires when all of them are (None: the batch loads nothing);
``load_issued[g]`` when the host issued load op g's first copy call, ``launched[i]`` when
it launched compute op i (None: no host lane modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from hicache.runtime.handles import CacheExtentRef
from hicache.runtime.interface import BackupIntent, BatchPlan, PreparedBatchHandle


@dataclass(slots=True)
class PendingBackup:
    intent: BackupIntent
    dst: CacheExtentRef
    src_pages: list[int]
    dst_pages: list[int]
    done: simpy.Event


@dataclass(slots=True)
class LoadGroup:
    """One h2d op: the layers it moves, its bytes and copy calls."""

    layers: range
    nbytes: int
    calls: int


@dataclass(slots=True)
class BatchState:
    plan: BatchPlan
    handle: PreparedBatchHandle
    generation: int
    prefills: list[tuple[int, int]] = field(default_factory=list)  # (new, context) chunks
    decodes: list[int] = field(default_factory=list)  # contexts of decode slices
    finished: tuple[int, ...] = ()
    layer_events: list[simpy.Event] | None = None
    loads_done: simpy.Event | None = None
    backups: list[PendingBackup] = field(default_factory=list)
    extra_s: float = 0.0  # state copies (MAMBA checkpoints, copy-on-write) added to compute
    load_groups: list[LoadGroup] = field(default_factory=list)
    load_issued: list[simpy.Event] = field(default_factory=list)
    load_issue_end: list[float] = field(default_factory=list)
    launched: list[simpy.Event] | None = None


def paired_runs(src: list[int], dst: list[int]) -> int:
    """Copy calls needed when both source and destination runs must be contiguous."""
    runs = 0
    prev_s = prev_d = -2
    for s, d in zip(src, dst, strict=True):
        if s != prev_s + 1 or d != prev_d + 1:
            runs += 1
        prev_s, prev_d = s, d
    return runs
