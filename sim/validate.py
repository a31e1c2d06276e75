"""Plan validation: stale handles, misplaced extents, double frees and capacity, all
checked before a prepare changes anything (prepare is atomic).

Invariant: a plan that passes :func:`check_plan` and :func:`check_capacity` can be placed
without an allocation failing: capacity counts what the plan's frees and releases return
(they apply first).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from hicache.runtime.handles import (
    CacheExtentRef,
    RequestRuntimeHandle,
    StaleHandleError,
    Tier,
    check_generation,
)
from hicache.runtime.interface import BatchPlan, CapacityError, Release, RequestSlice
from sim.rows import RequestRow

if TYPE_CHECKING:
    from sim.runtime import SimRuntime


def check_ext(rt: SimRuntime, ext: CacheExtentRef, tier: Tier, what: str) -> None:
    check_generation(ext, rt.runtime_id, rt.generation, what)
    if ext.tier is not tier:
        raise ValueError(f"{what} must be on {tier}, got {ext.tier}")


def row_of(rt: SimRuntime, handle: RequestRuntimeHandle, what: str) -> RequestRow:
    check_generation(handle, rt.runtime_id, rt.generation, what)
    row = rt.rows.get(handle.slot_id)
    if row is None or row.handle != handle:
        raise StaleHandleError(f"{what}: request slot {handle.slot_id} is not open (the "
                               "handle outlived its release)")
    return row


def check_plan(rt: SimRuntime, plan: BatchPlan) -> None:
    """Reject stale or misplaced handles before anything changes."""
    seen: set[int] = set()
    for s in plan.slices:
        if s.rid in seen:
            raise ValueError(f"request {s.rid} appears twice in batch {plan.batch_id}")
        seen.add(s.rid)
        if s.request is not None:
            row_of(rt, s.request, f"request {s.rid}")
            if s.attach or s.loads:
                raise ValueError(f"request {s.rid}: attach/loads only on its first slice")
        for ext in s.attach:  # state pieces may come from L2 (hybrid load-back)
            check_ext(rt, ext, Tier.HOST if ext.tier is Tier.HOST and ext.pool != "full"
                      else Tier.DEVICE, f"attach of request {s.rid}")
            if ext.pool != "full" and not rt.state.active:
                raise ValueError(f"attach of request {s.rid}: pool {ext.pool!r} is not kept "
                                 "by this runtime")
        for load in s.loads:
            check_ext(rt, load.src, Tier.HOST, f"load of request {s.rid}")
    for b in plan.backups:
        check_ext(rt, b.src, Tier.DEVICE, f"backup job {b.job_id}")
    for st in plan.stores:
        check_ext(rt, st.src, Tier.HOST, f"store job {st.job_id}")
        if len(st.keys) != st.src.num_pages:
            raise ValueError(f"store job {st.job_id}: {len(st.keys)} keys for "
                             f"{st.src.num_pages} pages")
    if (plan.stores or plan.prefetches) and rt.l3 is None:
        raise ValueError("store/prefetch intents need an L3 (SimRuntime(l3=...))")
    for ext in plan.frees:
        check_generation(ext, rt.runtime_id, rt.generation, "freed extent")
    released = {rel.request.slot_id for rel in plan.releases}
    if len(released) != len(plan.releases):
        raise ValueError(f"batch {plan.batch_id} releases a request twice")
    if any(s.request is not None and s.request.slot_id in released for s in plan.slices):
        raise ValueError(f"batch {plan.batch_id} both releases and continues a request")
    for rel in plan.releases:
        row = row_of(rt, rel.request, "release")
        for keep in rel.kept():
            check_ext(rt, keep, Tier.DEVICE, "release keep")
            ok = (set(keep.pages()) <= row.own if keep.pool == "full"
                  else rt.state.check_keep(rel.request.slot_id, keep))
            if not ok:
                raise ValueError(f"release of request {row.rid}: keep holds pages the "
                                 "request did not allocate")
    _check_frees(rt, plan)


def _released_full(rt: SimRuntime, rel: Release) -> list[int]:
    row = rt.rows[rel.request.slot_id]
    keep = {p for e in rel.kept() if e.pool == "full" for p in e.pages()}
    return [p for p in row.pages if p in row.own and p not in keep]


def _check_frees(rt: SimRuntime, plan: BatchPlan) -> None:
    """Every page the plan frees is allocated and freed once (frees and releases), and
    none is read by the plan's own backups or stores."""
    reads = {(b.src.tier, b.src.pool, p) for b in plan.backups for p in b.src.pages()} | {
        (s.src.tier, s.src.pool, p) for s in plan.stores for p in s.src.pages()}
    seen: set[tuple[Tier, str, int]] = set()
    for what, tier, pool, pages in (
            *((f"free of {e.num_pages} pages", e.tier, e.pool, e.pages()) for e in plan.frees),
            *((f"release of request {rt.rows[r.request.slot_id].rid}", Tier.DEVICE, "full",
               _released_full(rt, r)) for r in plan.releases)):
        pages_pool = rt.tier(tier)[pool]
        for p in pages:
            if not pages_pool.is_allocated(p):
                raise ValueError(f"{what}: {tier.value} page {p} of pool {pool!r} is not "
                                 "allocated (freed before?)")
            if (tier, pool, p) in reads:
                raise ValueError(f"{what}: plan frees {tier.value} page {p} that its own "
                                 "backups or stores read")
            if (tier, pool, p) in seen:
                raise ValueError(f"{what}: {tier.value} page {p} of pool {pool!r} is freed "
                                 f"twice in batch {plan.batch_id}")
            seen.add((tier, pool, p))


def new_pages(rt: SimRuntime, s: RequestSlice, existing: int) -> int:
    if s.context_tokens > existing * rt.page_size:
        raise ValueError(f"request {s.rid}: context {s.context_tokens} tokens but only "
                         f"{existing} pages of {rt.page_size} hold KV")
    total = math.ceil((s.context_tokens + s.new_tokens) / rt.page_size)
    return max(0, total - existing)


def check_capacity(rt: SimRuntime, plan: BatchPlan) -> None:
    need: Counter[tuple[Tier, str]] = Counter()
    for s in plan.slices:
        if s.request is not None:
            existing = len(rt.rows[s.request.slot_id].pages)
        else:
            existing = sum(e.num_pages for e in s.attach if e.pool == "full") + sum(
                ld.src.num_pages for ld in s.loads if ld.src.pool == "full")
        new = new_pages(rt, s, existing)
        need[(Tier.DEVICE, "full")] += new
        if rt.state.active:
            for pool, n in rt.state.needs(s, new).items():
                need[(Tier.DEVICE, pool)] += n
        for ld in s.loads:
            need[(Tier.DEVICE, ld.src.pool)] += ld.src.num_pages
        for ext in s.attach:
            if ext.tier is Tier.HOST:
                need[(Tier.DEVICE, ext.pool)] += ext.num_pages
    for b in plan.backups:
        need[(Tier.HOST, b.src.pool)] += b.src.num_pages
    for pf in plan.prefetches:
        need[(Tier.HOST, "full")] += pf.max_pages
    back: Counter[tuple[Tier, str]] = Counter()  # what the frees and releases return first
    for ext in plan.frees:
        back[(ext.tier, ext.pool)] += ext.num_pages
    for rel in plan.releases:
        back[(Tier.DEVICE, "full")] += len(_released_full(rt, rel))
        if rt.state.active:
            for pool, n in rt.state.releasable(rel.request.slot_id, rel.kept()).items():
                back[(Tier.DEVICE, pool)] += n
    for (tier, pool), n in need.items():
        free = rt.tier(tier)[pool].free_count + back[(tier, pool)]
        if n > free:
            raise CapacityError(f"batch {plan.batch_id} needs {n} {tier.value} pages of "
                                f"pool {pool!r}, {free} free (not accounted for)")
