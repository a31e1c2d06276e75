"""SharedGPURuntime: several schedulers on one runtime, one allocator, one KV pool.

    Scheduler A ── TenantRuntime "rt/A" ─┐                 ┌ one allocator, one pool,
    Scheduler B ── TenantRuntime "rt/B" ─┼─ SharedGPURuntime ─ one set of streams
    Scheduler C ── TenantRuntime "rt/C" ─┘   (ids renumbered, └ (SimRuntime, TorchRuntime)
                                              completions routed back)

Each scheduler holds a :class:`TenantRuntime`, a RuntimeInterface of its own: its
handles and extents carry the tenant's runtime id ("rt/A"), so a handle of another
tenant is refused as stale (isolation), and so is an extent of pages the runtime last
gave to another tenant. Batch and job ids are renumbered into one space on the way in
(compute batches 1, 2, ... and cache-only plans -1, -2, ... stay so) and back on the way
out; every completion goes to the tenant that issued it, in the runtime's order.

Capacity: a tenant's RuntimeInfo offers the most it can ever hold under the sharing
policy (:mod:`hicache.runtime.sharing`); its scheduler's page budget consults the
shared :class:`~hicache.runtime.sharing.PoolLedger` for the live limit, and the ledger
reads what the runtime has placed for each tenant here (:meth:`placed`), so the sum
never exceeds the pool. Host (L2) pages are split statically, in proportion to the
tenants' quotas (static) or minimums (shared): a scheduler accounts L2 alone.

The runtime underneath reports its free device pages through ``free_pages`` (a callable
the composition root passes), so what each tenant holds is measured, not assumed.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from hicache.runtime.handles import CacheExtentRef, Kind, StaleHandleError, Tier
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    Completion,
    PreparedBatchHandle,
    RuntimeInfo,
    RuntimeInterface,
    StoreIntent,
)
from hicache.runtime.sharing import PoolLedger, SharingPolicy

_Page = tuple[Tier, str, int]


class SharedGPURuntime:
    """One runtime behind per-tenant views (see the module docstring)."""

    def __init__(self, runtime: RuntimeInterface, policy: SharingPolicy,
                 free_pages: Callable[[], int]) -> None:
        self.rt, self.policy, self.free_pages = runtime, policy, free_pages
        self.base = runtime.info()
        if policy.total != self.base.device_pages[Kind.FULL]:
            raise ValueError(f"sharing policy for {policy.total} pages, the runtime has "
                             f"{self.base.device_pages[Kind.FULL]}")
        self.ledger = PoolLedger(policy, self.placed)
        self.views: dict[str, TenantRuntime] = {}
        self._owner: dict[_Page, str] = {}  # page -> the tenant it was last placed for
        self._placed: dict[str, int] = dict.fromkeys(policy.share, 0)
        self._batches: dict[int, tuple[str, int]] = {}  # runtime id -> (tenant, its id)
        self._jobs: dict[int, tuple[str, int]] = {}
        self._next_batch = self._next_cache = self._next_job = 0

    def tenant(self, name: str, cls: type[TenantRuntime] | None = None) -> TenantRuntime:
        """The view of tenant ``name`` (created once, of class ``cls``)."""
        if name not in self.policy.share:
            raise ValueError(f"no tenant {name!r}: the sharing policy has "
                             f"{sorted(self.policy.share)}")
        if name not in self.views:
            self.views[name] = (cls or TenantRuntime)(self, name)
        return self.views[name]

    def attach(self, tenant: str, budget: Any) -> None:
        """Bound a scheduler's page budget (``scheduler.kv.budget``) by the live limit."""
        budget.share = self.ledger.join(tenant, budget.device_used)

    def placed(self, tenant: str) -> int:
        """Device pages of pool 'full' the runtime holds for ``tenant`` (request rows and
        the pages its tree kept)."""
        return self._placed[tenant]

    # ---- completions ------------------------------------------------------------------
    def distribute(self, completions: Iterable[Completion]) -> None:
        """Route the runtime's completions to their tenants' queues, ids translated back."""
        for c in completions:
            if isinstance(c, BatchCompletion):
                tenant, bid = self._batches.pop(c.batch_id)
                self.views[tenant].queue.append(dataclasses.replace(c, batch_id=bid))
            else:
                tenant, job = self._jobs.pop(c.job_id)
                ext = c.extent
                if ext is not None:
                    self._own(tenant, ext)
                    ext = self._out(ext, tenant)
                self.views[tenant].queue.append(dataclasses.replace(c, job_id=job,
                                                                    extent=ext))

    def poll_all(self) -> None:
        self.distribute(self.rt.poll())

    def wait_all(self, timeout: float | None = None) -> bool:
        """Wait for the runtime's next completions and route them; False if none came."""
        got = self.rt.wait(timeout)
        self.distribute(got)
        return bool(got)

    # ---- translation ------------------------------------------------------------------
    def _in(self, obj: Any, tenant: str) -> Any:
        """A tenant's handle/extent -> the runtime's; refuse another tenant's."""
        view = self.views[tenant]
        if obj.runtime_id != view.runtime_id:
            raise StaleHandleError(f"a handle of {obj.runtime_id!r} presented by tenant "
                                   f"{tenant!r} ({view.runtime_id!r})")
        if isinstance(obj, CacheExtentRef):
            for p in obj.pages():
                owner = self._owner.get((obj.tier, obj.pool, p))
                if owner is not None and owner != tenant:
                    raise StaleHandleError(f"tenant {tenant!r} presented {obj.tier.value} "
                                           f"page {p} of pool {obj.pool}, which belongs "
                                           f"to tenant {owner!r}")
        return dataclasses.replace(obj, runtime_id=self.base.runtime_id)

    def _out(self, obj: Any, tenant: str) -> Any:
        return dataclasses.replace(obj, runtime_id=self.views[tenant].runtime_id)

    def _own(self, tenant: str, ext: CacheExtentRef, start: int = 0) -> None:
        for i, p in enumerate(ext.pages()):
            if i >= start:
                self._owner[(ext.tier, ext.pool, p)] = tenant

    def _plan_in(self, plan: BatchPlan, tenant: str) -> BatchPlan:
        def ext(e: CacheExtentRef) -> CacheExtentRef:
            return self._in(e, tenant)

        slices = tuple(dataclasses.replace(
            s, request=None if s.request is None else self._in(s.request, tenant),
            attach=tuple(map(ext, s.attach)),
            loads=tuple(dataclasses.replace(ld, src=ext(ld.src)) for ld in s.loads))
            for s in plan.slices)
        if slices:
            self._next_batch += 1
            bid = self._next_batch
        else:
            self._next_cache -= 1
            bid = self._next_cache
        return BatchPlan(
            bid, slices,
            tuple(BackupIntent(ext(b.src), self._job(tenant, b.job_id)) for b in plan.backups),
            tuple(StoreIntent(ext(s.src), s.keys, self._job(tenant, s.job_id))
                  for s in plan.stores),
            tuple(dataclasses.replace(p, job_id=self._job(tenant, p.job_id))
                  for p in plan.prefetches),
            tuple(map(ext, plan.frees)),
            tuple(dataclasses.replace(r, request=self._in(r.request, tenant),
                                      keep=None if r.keep is None else
                                      tuple(map(ext, r.kept()))) for r in plan.releases))

    def _job(self, tenant: str, job: int) -> int:
        self._next_job += 1
        self._jobs[self._next_job] = (tenant, job)
        return self._next_job


class TenantRuntime:
    """One scheduler's RuntimeInterface onto a :class:`SharedGPURuntime`."""

    def __init__(self, shared: SharedGPURuntime, tenant: str) -> None:
        self.shared, self.tenant = shared, tenant
        self.runtime_id = f"{shared.base.runtime_id}/{tenant}"
        self.queue: deque[Completion] = deque()
        # tenant batch id -> (the runtime's handle, the tenant's)
        self._prepared: dict[int, tuple[PreparedBatchHandle, PreparedBatchHandle]] = {}
        self._seen: dict[tuple[str, int], int] = {}  # request handle -> kv pages seen

    def info(self) -> RuntimeInfo:
        base, policy = self.shared.base, self.shared.policy
        part = policy.share[self.tenant] / max(1, sum(policy.share.values()))
        host = {k: int(v * part) for k, v in base.host_pages.items()}
        return dataclasses.replace(base, runtime_id=self.runtime_id,
                                   device_pages={**base.device_pages,
                                                 Kind.FULL: policy.capacity(self.tenant)},
                                   host_pages=host)

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        shared, rt = self.shared, self.shared.rt
        if plan.batch_id in self._prepared:
            raise ValueError(f"batch {plan.batch_id} is already prepared")
        inner = shared._plan_in(plan, self.tenant)
        free = shared.free_pages()
        handle = rt.prepare_batch(inner)  # atomic: on error nothing was placed
        shared._placed[self.tenant] += free - shared.free_pages()
        shared._batches[inner.batch_id] = (self.tenant, plan.batch_id)
        out = self._handle_out(handle, plan)
        self._prepared[plan.batch_id] = (handle, out)
        return out

    def execute_batch(self, handle: PreparedBatchHandle) -> None:
        if handle.runtime_id != self.runtime_id:
            raise StaleHandleError(f"a batch handle of {handle.runtime_id!r} presented to "
                                   f"{self.runtime_id!r}")
        inner, issued = self._prepared.get(handle.batch_id, (None, None))
        if issued != handle:  # by value, as every runtime compares handles
            raise ValueError(f"batch {handle.batch_id} was not prepared or already executed")
        del self._prepared[handle.batch_id]
        self.shared.rt.execute_batch(inner)

    def poll(self) -> list[Completion]:
        self.shared.poll_all()
        out, self.queue = list(self.queue), deque()
        return out

    def wait(self, timeout: float | None = None) -> list[Completion]:
        """This tenant's completions, waiting for the first up to ``timeout`` afresh after
        each completion of another tenant (the control side reads no clock); [] once a
        wait passes with nothing at all."""
        self.shared.poll_all()
        while not self.queue and self.shared.wait_all(timeout):
            pass
        return self.poll()

    def __getattr__(self, name: str) -> Any:  # profile, timeline, now, ...: the runtime's
        return getattr(self.shared.rt, name)

    # ---- internals ----------------------------------------------------------------------
    def _handle_out(self, h: PreparedBatchHandle, plan: BatchPlan) -> PreparedBatchHandle:
        shared, t = self.shared, self.tenant
        slices = []
        for ps, sl in zip(h.slices, plan.slices, strict=True):
            key = (ps.request.runtime_id, ps.request.slot_id)
            seen = 0 if sl.request is None else self._seen.get(key, 0)
            shared._own(t, ps.kv, seen)
            self._seen[key] = ps.kv.num_pages
            for e in (*ps.loaded, *ps.state):
                shared._own(t, e)
            slices.append(dataclasses.replace(
                ps, request=shared._out(ps.request, t), kv=shared._out(ps.kv, t),
                loaded=tuple(shared._out(e, t) for e in ps.loaded),
                state=tuple(shared._out(e, t) for e in ps.state)))
        for r in plan.releases:
            self._seen.pop((self.shared.base.runtime_id, r.request.slot_id), None)
        for e in h.backups:
            shared._own(t, e)
        return dataclasses.replace(h, runtime_id=self.runtime_id, batch_id=plan.batch_id,
                                   slices=tuple(slices),
                                   backups=tuple(shared._out(e, t) for e in h.backups))
