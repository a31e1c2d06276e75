"""Where the cache manager's intents go: into the next BatchPlan, or straight to an executor.

    KVCacheManager ── free / release / backup / store / prefetch ──> IntentSink
        PlanBuilder (scheduler): pending intents -> the next BatchPlan (with or without
                                 compute), plans in flight until their completion
        replay's zero-time executor: carries each intent out at once

Batch ids: compute batches 1, 2, ...; cache-only plans -1, -2, ... (when a cache-only
plan is needed depends on transfer timing, so it must not shift the compute batches' ids
that predicted and measured timelines are matched by). Job ids (backups, stores,
prefetches) come from one counter per sink.
"""

from __future__ import annotations

from typing import Protocol

from hicache.runtime.handles import CacheExtentRef
from hicache.runtime.interface import (
    BackupIntent,
    BatchPlan,
    PrefetchIntent,
    Release,
    RequestSlice,
    StoreIntent,
)
from hicache.runtime.slot_init import slot_builder

_plan = slot_builder(BatchPlan)  # one per step that plans: at slot speed (ARCHITECTURE.md)


class IntentSink(Protocol):
    def next_job_id(self) -> int: ...

    def free(self, extent: CacheExtentRef) -> None: ...

    def release(self, release: Release) -> None: ...

    def backup(self, intent: BackupIntent) -> None: ...

    def store(self, intent: StoreIntent) -> None: ...

    def prefetch(self, intent: PrefetchIntent) -> None: ...


class PlanBuilder:
    """Collects intents between plans and numbers the plans (see the module docstring)."""

    def __init__(self) -> None:
        self._job_id = 0
        self._batch_id = 0
        self._cache_plan_id = 0
        self._backups: list[BackupIntent] = []
        self._stores: list[StoreIntent] = []
        self._prefetches: list[PrefetchIntent] = []
        self._frees: list[CacheExtentRef] = []
        self._releases: list[Release] = []
        self.inflight: dict[int, BatchPlan] = {}
        # plans in inflight with slices: compute_inflight(), read as an attribute by the
        # scheduler every step; only build and complete change it
        self.computing = 0
        # an intent is pending (one of the lists above is not empty): read by the
        # scheduler every step, so kept as the lists change (the intents set it, build
        # clears it), not derived per read
        self.has_pending = False

    # -- IntentSink ------------------------------------------------------------------
    def next_job_id(self) -> int:
        self._job_id += 1
        return self._job_id

    def free(self, extent: CacheExtentRef) -> None:
        self._frees.append(extent)
        self.has_pending = True

    def release(self, release: Release) -> None:
        self._releases.append(release)
        self.has_pending = True

    def backup(self, intent: BackupIntent) -> None:
        self._backups.append(intent)
        self.has_pending = True

    def store(self, intent: StoreIntent) -> None:
        self._stores.append(intent)
        self.has_pending = True

    def prefetch(self, intent: PrefetchIntent) -> None:
        self._prefetches.append(intent)
        self.has_pending = True

    # -- plans -----------------------------------------------------------------------
    def build(self, slices: tuple[RequestSlice, ...] = ()) -> BatchPlan:
        """The next plan: ``slices`` plus every pending intent; it stays in flight until
        :meth:`complete`."""
        if slices:
            self._batch_id += 1
            self.computing += 1
            bid = self._batch_id
        else:
            self._cache_plan_id -= 1
            bid = self._cache_plan_id
        if not self.has_pending:  # most plans carry no intent
            plan = _plan(bid, slices, (), (), (), (), ())  # the empty lists stay
        else:
            plan = _plan(bid, slices, tuple(self._backups), tuple(self._stores),
                         tuple(self._prefetches), tuple(self._frees), tuple(self._releases))
            self._backups, self._stores, self._prefetches = [], [], []
            self._frees, self._releases = [], []
            self.has_pending = False
        self.inflight[bid] = plan
        return plan

    @property
    def planned(self) -> tuple[int, int]:
        """(compute batches, cache-only plans) numbered so far; folded steps count as the
        compute batches they stand for (:meth:`skip_batches`)."""
        return self._batch_id, -self._cache_plan_id

    def skip_batches(self, n: int) -> None:
        """``n`` compute batches were planned, run and completed elsewhere (a simulator's
        folded decode steps): the next compute batch id moves on by ``n``."""
        self._batch_id += n

    def complete(self, batch_id: int) -> BatchPlan:
        plan = self.inflight.pop(batch_id)
        if plan.slices:
            self.computing -= 1
        return plan

    def compute_inflight(self) -> int:
        """Plans with compute in flight; cache-only plans do not hold the pipeline.
        Counted as plans enter and leave :attr:`inflight` (only :meth:`build` and
        :meth:`complete` change it), not by a walk of it."""
        return self.computing
