"""The control-side scheduler: a synchronous state machine over one RuntimeInterface.

    step(now, arrivals, completions) -> [BatchPlan, ...]

Each step (1) applies completions (batches: progress, prompt pages into the tree, write
policy backups, releases; transfers: L2 copies exist, L3 stores, prefetched pages), (2)
admits waiting requests FIFO (L1/L2 match, load-back of the L2 tail, L3 prefetch under
its stop policy, room made by eviction; each admitted request reserves its whole
footprint, so no preemption is needed), and (3) emits the next plan while fewer than
``max_inflight`` batches are outstanding: a prefill batch (chunked) if any prompt work is
waiting, else a decode batch. With overlap on (max_inflight 2) batch N+1 is planned and
its loads start while N runs. The scheduler never reads a clock, holds no stream, event or
physical address: only handles, extents and page *counts*.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, fields

from hicache.config import CacheConfig
from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    Completion,
    LoadIntent,
    Phase,
    PrefetchIntent,
    PreparedBatchHandle,
    Release,
    RequestSlice,
    RuntimeInfo,
    StoreIntent,
    TransferCompletion,
    TransferKind,
)
from hicache.scheduler.components import ComponentTracker
from hicache.scheduler.l3 import L3Prefetcher
from hicache.scheduler.state import RequestState, Status
from hicache.tiers.hashing import page_hashes
from hicache.tiers.write_policy import backup_threshold
from hicache.tree.actions import Action, BackupNode, Deleted, Demoted, FreeDevice, FreeHost
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.locks import LockHandle
from hicache.tree.node import HOST, Node
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.request import Request


@dataclass(frozen=True)
class SchedulerConfig:
    max_running_requests: int = 128
    chunked_prefill_size: int = 8192  # prompt tokens per prefill batch
    overlap: bool = True  # plan batch N+1 while N executes
    l3: bool = False  # an L3 tier is attached to the runtime
    requery_lost_prefix: bool = True  # re-ask L3 at the queue head if L1/L2 lost the prefix
    track_components: bool = False  # track the runtime's SWA / MAMBA pools too (L1 only)


# scenario keys of the ``scheduler:`` section (the rest of SchedulerConfig is derived)
SCHEDULER_KEYS = frozenset(f.name for f in fields(SchedulerConfig)) - {"l3"}


class Scheduler:
    def __init__(self, cache: CacheConfig, info: RuntimeInfo, cfg: SchedulerConfig,
                 replica: int = 0) -> None:
        self.cache, self.info, self.cfg, self.replica = cache, info, cfg, replica
        self.page = info.page_size
        if self.page != cache.page_size:
            raise ValueError(f"page_size {cache.page_size} but the runtime uses {self.page}")
        if cfg.track_components and cache.enable_hierarchical_cache:
            raise ValueError("scheduler.track_components: L1 only for now; set "
                             "cache.enable_hierarchical_cache: false")
        spec = (TreeSpec.hybrid(self.page, swa_window=info.swa_window, mamba=info.mamba)
                if cfg.track_components else TreeSpec(self.page))
        self.tree = UnifiedRadixTree(spec, eviction_policy=cache.radix_eviction_policy,
                                     session_aware=cache.enable_session_aware_eviction)
        self.l2 = cache.enable_hierarchical_cache and info.host_pages.get("full", 0) > 0
        # buffer_only: an L1 eviction deletes (the KV is in L3), it never demotes to L2
        self.tree.residency.host_enabled = self.l2 and not cache.hicache_buffer_only
        self.l3 = L3Prefetcher(self) if cfg.l3 and self.l2 else None
        self.tree.residency.write_back = cache.hicache_write_policy == "write_back"
        self.threshold = backup_threshold(cache.hicache_write_policy) if self.l2 else None
        self.device_total = info.device_pages["full"]
        self.host_total = info.host_pages.get("full", 0) if self.l2 else 0
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self.requests: dict[int, RequestState] = {}
        self.finished: list[RequestState] = []
        self.decisions: list[tuple] = []
        self._batch_id = 0
        self._job_id = 0
        self._cache_plan_id = 0
        self._inflight: dict[int, BatchPlan] = {}
        self._backups: dict[int, tuple[int, int, list[str]]] = {}  # job -> (tree job, pages, keys)
        self._backup_hosts: dict[int, CacheExtentRef] = {}
        self._stores: dict[int, tuple[list[Node], LockHandle]] = {}  # job -> (nodes, lock)
        self._host_reserved = 0
        self._own_pages = 0
        self._loads_pending = 0  # device pages admitted loads will take at prepare
        self._pending_backups: list[BackupIntent] = []
        self._pending_stores: list[StoreIntent] = []
        self._pending_prefetch: list[PrefetchIntent] = []
        self._frees: list[CacheExtentRef] = []
        self._releases: list[Release] = []
        self.components = ComponentTracker(self) if cfg.track_components else None

    # -- public ----------------------------------------------------------------------
    def step(self, now: float, arrivals: Iterable[Request] = (),
             completions: Iterable[Completion] = ()) -> list[BatchPlan]:
        """Apply arrivals and completions, admit, and return the next plan (at most one;
        call again after :meth:`prepared` to fill the overlap pipeline)."""
        for req in arrivals:
            self._arrive(req)
        finished: list[int] = []
        for c in completions:
            if isinstance(c, BatchCompletion):
                finished.extend(self._batch_done(c))
            else:
                self._transfer_done(c)
        self.just_finished = finished
        self._admit(now)
        plans = []
        if self._compute_inflight() < (2 if self.cfg.overlap else 1):
            plan = self._next_plan()
            if plan is not None:
                plans.append(plan)
        if not plans and (self._frees or self._releases or self._pending_backups
                          or self._pending_stores or self._pending_prefetch):
            plans.append(self._plan(()))  # move or free cache with no compute
        return plans

    def next_job_id(self) -> int:
        self._job_id += 1
        return self._job_id

    def _compute_inflight(self) -> int:
        """Batches with compute in flight; cache-only plans do not hold the pipeline."""
        return sum(1 for p in self._inflight.values() if p.slices)

    def prepared(self, handle: PreparedBatchHandle) -> None:
        """The runtime prepared a plan: learn request handles, KV and L2 extents."""
        plan = self._inflight[handle.batch_id]
        for ps, sl in zip(handle.slices, plan.slices, strict=True):
            st = self.requests[ps.rid]
            st.handle, st.kv = ps.request, ps.kv
            if self.components is not None:
                self.components.prepared(st, sl, ps)
            if sl.loads:
                for node, ext in zip(st.load_nodes, ps.loaded, strict=True):
                    self.tree.residency.put_value(node, "device", Kind.FULL, ext)
                    self.tree.residency.touched(node)
                    self._loads_pending -= ext.num_pages
        for intent, host in zip(plan.backups, handle.backups, strict=True):
            self._backup_hosts[intent.job_id] = host

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.running or self._inflight or self._backups
                    or self._stores or (self.l3 is not None and self.l3.jobs))

    def next_deadline(self, now: float) -> float | None:
        """When a waiting request's prefetch timeout expires (so a driver can wake up)."""
        return self.l3.next_deadline(self.waiting, now) if self.l3 is not None else None

    def records(self) -> list[dict]:
        return [st.record() for st in sorted(self.requests.values(), key=lambda s: s.rid)]

    # -- accounting ------------------------------------------------------------------
    def device_free(self) -> int:
        own = self._own_pages  # == sum of running requests' footprint_pages (kept exact)
        return (self.device_total - self.tree.held_pages(Tier.DEVICE) - own
                - self._loads_pending)

    def host_free(self) -> int:
        return self.host_total - self.tree.held_pages(Tier.HOST) - self._host_reserved

    def _make_room(self, device: bool, pages: int) -> bool:
        for _ in range(3):
            free = self.device_free() if device else self.host_free()
            if free >= pages:
                return True
            res = (self.tree.evict_device(pages - free) if device
                   else self.tree.evict_host(pages - free))
            if not res.actions:
                break
            self._apply(res.actions)
        return (self.device_free() if device else self.host_free()) >= pages

    def _apply(self, actions: Iterable[Action]) -> None:
        for a in actions:
            if isinstance(a, (FreeDevice, FreeHost)):
                self._frees.append(a.extent)
            elif isinstance(a, Demoted):
                self.decisions.append(("evict", a.node_id, a.tokens, "demote"))
            elif isinstance(a, Deleted):
                self.decisions.append(("evict", a.node_id, a.tokens, "delete"))
            elif isinstance(a, BackupNode):
                self._start_backup(a, keys=None)

    # -- arrivals and admission ------------------------------------------------------
    def _arrive(self, req: Request) -> None:
        st = RequestState(req, page_keys(req.tokens, self.page), self.replica)
        if self.cfg.l3:
            st.hashes = page_hashes(req.tokens, self.page)
        self.requests[req.rid] = st
        self.waiting.append(st)

    def _admit(self, now: float) -> None:
        if self.l3 is not None:
            self.l3.on_arrivals(self.waiting, now)
        while self.waiting and len(self.running) < self.cfg.max_running_requests:
            st = self.waiting[0]
            if st.req.arrival > now:
                break
            if self.l3 is not None and not self.l3.ready(st, now):
                break
            if not self._start(st, now):
                break
            self.waiting.popleft()

    def _start(self, st: RequestState, now: float) -> bool:
        ok = self._start_inner(st, now)
        if ok:  # the request now holds its own locks on what it reuses
            for lock in (st.prefix_lock, st.prefetch_lock):
                if lock is not None:
                    self.tree.unlock(lock)
            st.prefix_lock = st.prefetch_lock = None
        return ok

    def _start_inner(self, st: RequestState, now: float) -> bool:
        if self.components is not None:
            return self.components.start(st, now)
        m = self.tree.match(st.pages)
        tail = list(m.host_tail) if self.l2 else []
        host_tokens = m.host_tokens if tail else 0
        if host_tokens < self.cache.load_back_threshold:
            tail, host_tokens = [], 0
        reuse = m.device_tokens + host_tokens
        if reuse >= st.prompt_len:  # recompute at least the last page
            reuse = (st.prompt_len - 1) // self.page * self.page
            if reuse < m.device_tokens:
                tail, host_tokens = [], 0
            else:
                host_tokens = reuse - m.device_tokens
                keep, acc = [], 0
                for n in tail:
                    if acc >= host_tokens:
                        break
                    keep.append(n)
                    acc += n.num_pages * self.page
                tail = keep if acc == host_tokens else []
                host_tokens = acc if tail else 0
                reuse = m.device_tokens + host_tokens
        dev_tokens = min(m.device_tokens, reuse)
        lock = self.tree.lock(m.device_node if not tail else tail[-1])
        st.prefix_tokens = dev_tokens + host_tokens
        load_pages = host_tokens // self.page
        if not self._make_room(True, st.footprint_pages(self.page) + load_pages):
            self.tree.unlock(lock)
            st.prefix_tokens = 0
            return False
        st.lock = lock
        st.host_lock = self.tree.locks.lock_host(tail) if tail else None
        st.load_nodes = tail
        self._loads_pending += load_pages
        st.attach = self._device_extents(m.path[:m.device_nodes], dev_tokens)
        from_l3 = min(host_tokens, st.prefetch_pages * self.page)
        st.device_hit, st.host_hit, st.l3_hit = dev_tokens, host_tokens - from_l3, from_l3
        st.status, st.admitted = Status.RUNNING, now
        self.running.append(st)
        self._own_pages += st.footprint_pages(self.page)
        self.decisions.append(("admit", st.rid, st.device_hit, st.host_hit, st.l3_hit))
        if tail:
            self.decisions.append(("load", st.rid, host_tokens))
        return True

    def _device_extents(self, nodes, tokens: int) -> tuple[CacheExtentRef, ...]:  # noqa: ANN001
        out, left = [], tokens // self.page
        for n in nodes:
            if left <= 0:
                break
            ext = n.device[Kind.FULL]
            out.append(ext if ext.num_pages <= left else ext.slice(0, left))
            left -= ext.num_pages
        return tuple(out)

    # -- planning --------------------------------------------------------------------
    def _next_plan(self) -> BatchPlan | None:
        budget = self.cfg.chunked_prefill_size
        slices = []
        for st in self.running:
            left = st.to_prefill - st.prefill_planned
            if left <= 0 or budget <= 0 or (st.prefill_planned and st.handle is None):
                continue
            chunk = min(left, budget)
            pos = st.prefix_tokens + st.prefill_planned
            ckpt = False
            if self.components is not None:
                chunk, ckpt = self.components.cut(st, pos, chunk)
            budget -= chunk
            first = st.prefill_planned == 0
            last = chunk == left
            slices.append(RequestSlice(
                st.rid, Phase.PREFILL, st.prefix_tokens + st.prefill_planned, chunk,
                request=None if first else st.handle,
                attach=st.attach if first else (),
                loads=tuple(LoadIntent(n.host[Kind.FULL]) for n in st.load_nodes)
                if first else (),
                finishes=last and st.req.output_len <= 1, checkpoint=ckpt))
            st.prefill_planned += chunk
        if not slices:
            for st in self.running:
                if (st.prefill_planned < st.to_prefill or st.handle is None
                        or st.decode_planned >= st.req.output_len - 1):
                    continue
                st.decode_planned += 1
                slices.append(RequestSlice(
                    st.rid, Phase.DECODE, st.prompt_len + st.decode_planned - 1, 1,
                    request=st.handle, finishes=st.decode_planned >= st.req.output_len - 1))
        if not slices:
            return None
        return self._plan(tuple(slices))

    def _plan(self, slices: tuple[RequestSlice, ...]) -> BatchPlan:
        # compute batches are numbered 1, 2, ... and cache-only plans -1, -2, ...: when a
        # cache-only plan is needed depends on transfer timing, so it must not shift the
        # compute batches' ids that predicted and measured timelines are matched by
        if slices:
            self._batch_id += 1
            bid = self._batch_id
        else:
            self._cache_plan_id -= 1
            bid = self._cache_plan_id
        plan = BatchPlan(bid, slices, tuple(self._pending_backups),
                         tuple(self._pending_stores), tuple(self._pending_prefetch),
                         tuple(self._frees), tuple(self._releases))
        self._pending_backups, self._pending_stores, self._pending_prefetch = [], [], []
        self._frees, self._releases = [], []
        self._inflight[plan.batch_id] = plan
        return plan

    # -- completions -----------------------------------------------------------------
    def _batch_done(self, c: BatchCompletion) -> list[int]:
        plan = self._inflight.pop(c.batch_id)
        done = []
        for sl in plan.slices:
            st = self.requests[sl.rid]
            if sl.phase is Phase.PREFILL:
                st.prefill_done += sl.new_tokens
                if sl.loads and st.host_lock is not None:
                    self.tree.unlock(st.host_lock)
                    st.host_lock = None
                    if self.cache.hicache_buffer_only:
                        self._drop_staging(st.load_nodes)
                if st.prefill_done == st.to_prefill:
                    st.first_token = c.end
                    self._cache_prompt(st)
            else:
                st.decode_done += 1
            if sl.finishes:
                self._finish(st, c.end)
                done.append(st.rid)
        return done

    def _cache_prompt(self, st: RequestState) -> None:
        """Prompt computed: the tree takes its new full pages; the request keeps a lock."""
        node = (self._cache(st, st.pages) if self.components is None
                else self.components.cache_prompt(st))
        if node is not None:
            old = st.lock
            st.lock = self.tree.lock(node)
            if old is not None:
                self.tree.unlock(old)
        if self.threshold is not None:
            self._write_through(st, st.pages)

    def _cache(self, st: RequestState, pages: list) -> Node | None:
        """Insert ``pages`` (a prefix of the request's KV) into the tree; the request's own
        pages it takes become tree-owned (kept at release), duplicates stay the request's."""
        n = len(pages)
        first = st.prefix_tokens // self.page
        if n <= first or st.kv is None or st.kv.num_pages < n:
            return None
        ext = st.kv.slice(first, n)
        res = self.tree.insert(pages, {Kind.FULL: ext})
        dup = {p for a in res.actions for p in a.extent.pages()}
        own = [p for p in ext.pages() if p not in dup and p not in st.donated_ids]
        if own:
            st.donated.append(ext.with_pages(own))
            st.donated_ids.update(own)
            st.donated_pages += len(own)
            self._own_pages -= len(own)
        return res.node

    def _write_through(self, st: RequestState, pages: list) -> None:
        m = self.tree.match(pages, touch=False)
        for node in m.path[:m.device_nodes]:
            if (node.on_device and not node.on_host and not node.backing_up
                    and node.hit_count + 1 >= self.threshold):
                first, count = self.tree.page_span(node)
                keys = st.hashes[first:first + count] if st.hashes else []
                self._start_backup(self.tree.residency.begin_backup(node), keys)

    def _start_backup(self, a: BackupNode, keys: list[str] | None) -> None:
        full = dict(a.extents)[Kind.FULL]
        if not self._make_room(False, full.num_pages):
            self.tree.residency.abort_backup(a.node_id)
            return
        self._job_id += 1
        self._host_reserved += full.num_pages
        self._backups[self._job_id] = (a.node_id, full.num_pages, keys or [])
        self._pending_backups.append(BackupIntent(full, self._job_id))
        self.decisions.append(("backup", a.node_id, a.tokens))

    def _finish(self, st: RequestState, now: float) -> None:
        tail = None
        if (st.req.full_tokens is not None and st.req.output_len > 1  # keep the output's KV
                and self.components is None):  # (tracked: no checkpoint there, see docs)
            kv_tokens = st.prompt_len + st.req.output_len - 1
            pages = page_keys(st.req.full_tokens[:kv_tokens], self.page)
            if len(pages) > len(st.pages) and (tail := self._cache(st, pages)) is not None:
                if st.hashes:
                    st.hashes = page_hashes(st.req.full_tokens[:kv_tokens], self.page)
                if self.threshold is not None:
                    self._write_through(st, pages)
        st.finish, st.status = now, Status.DONE
        self.running.remove(st)
        self._own_pages -= st.footprint_pages(self.page)
        self.finished.append(st)
        keep = CacheExtentRef.concat(st.donated) if st.donated else None
        if self.components is not None:
            keep = self.components.finish(st) or None
        if st.handle is not None:
            self._releases.append(Release(st.handle, keep))
        node = tail or (st.lock.entries[0][0] if st.lock and st.lock.entries else None)
        if st.lock is not None:
            self.tree.unlock(st.lock)
        if st.req.session_id is not None:
            self.tree.reference_session(st.req.session_id, node)
            if st.req.close_session:
                self.tree.close_session(st.req.session_id)
        self.decisions.append(("finish", st.rid))

    def _transfer_done(self, c: TransferCompletion) -> None:
        if c.kind is TransferKind.BACKUP:
            tree_job, pages, keys = self._backups.pop(c.job_id)
            host = self._backup_hosts.pop(c.job_id)
            self._host_reserved -= pages
            nodes = self.tree.residency.complete_backup(tree_job, {Kind.FULL: host})
            if self.cfg.l3 and keys:
                self._job_id += 1
                self._pending_stores.append(StoreIntent(host, tuple(keys), self._job_id))
                # the L2 copy is read until L3 has it: pin it against L2 eviction
                self._stores[self._job_id] = (nodes, self.tree.locks.lock_host(nodes))
        elif c.kind is TransferKind.STORE:
            nodes, lock = self._stores.pop(c.job_id)
            self.tree.unlock(lock)
            if self.cache.hicache_buffer_only:
                self._drop_staging(nodes)
        elif c.kind is TransferKind.PREFETCH and self.l3 is not None:
            self.l3.done(c)

    def _drop_staging(self, nodes: list[Node]) -> None:
        """buffer_only: host memory was staging; free the L2 copy of nodes now on L1 (their
        KV is in L3 too). Host-only nodes leave through ordinary L2 eviction."""
        for n in nodes:
            if n.parent is None or not n.on_device or n.backing_up or n.locked(HOST):
                continue
            for kind in list(n.host):
                self._frees.append(self.tree.residency.pop_value(n, "host", kind))
            self.tree.residency.touched(n)

