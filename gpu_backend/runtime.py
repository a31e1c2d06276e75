"""TorchRuntime: the RuntimeInterface executed with torch on a GPU (or CPU threads).

prepare_batch(plan): validate every handle (stale -> StaleHandleError), free and release
behind fences, open rows, allocate device pages for new tokens and loads, host pages for
backups and prefetches, and start the loads at once on the h2d lane, one op and one event
per layer. execute_batch(handle): queue per-layer compute on the compute lane, layer i
waiting on load event i just before it (layer i+1 loads while layer i computes); after
the last layer, one all-layer D2H backup on the d2h lane; stores and prefetches on the
l3 lane. Completions and timeline rows are posted by the lanes as ops finish.
Invariant: the runtime places pages, the control side only accounts for them; a request
beyond the pools' capacity raises CapacityError.
L3: the client given is used behind :func:`gpu_backend.l3.guard` (checksummed pages,
deadlines, retries): an L3 fault is a miss or a failed store, counted in
:meth:`TorchRuntime.l3_faults`, never an error of the run; no wait of the runtime is
unbounded (``wait_timeout_s``: fences, lane dependencies, ``wait``/``drain``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from gpu_backend.completions import Outbox
from gpu_backend.hybrid import (
    HybridIndex,
    HybridModel,
    StateData,
    StateSpec,
    copy_states,
)
from gpu_backend.hybrid_host import StateHost
from gpu_backend.io import Mover
from gpu_backend.l3.resilient import RetryPolicy
from gpu_backend.l3_protocol import L3Store, count_hits, fetch_pages, store_pages
from gpu_backend.model import BatchIndex, SliceSpec, SyntheticModel
from gpu_backend.page_fences import PageFences
from gpu_backend.pools import DevicePool, HostPool, PageAllocator, ReqToTokenTable
from gpu_backend.shapes import ModelShape
from gpu_backend.streams import WAIT_TIMEOUT_S, LaneEvent, Lanes
from gpu_backend.writeback import TorchWriteback
from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    StaleHandleError,
    Tier,
    check_generation,
    coalesce,
    pools_of,
)
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    CapacityError,
    Completion,
    Phase,
    PrefetchIntent,
    PreparedBatchHandle,
    PreparedSlice,
    Release,
    RuntimeInfo,
    TransferCompletion,
    TransferKind,
)
from hicache.runtime.state import check_state_attach, state_loads
from hicache.runtime.writeback import WritebackConfig, make_policy
from hicache.timeline import Timeline


@dataclass
class _Prepared:
    batch_id: int
    specs: list[SliceSpec] = field(default_factory=list)
    op: str = "decode"
    finished: tuple[int, ...] = ()
    loads: list[LaneEvent] = field(default_factory=list)
    backups: list[tuple[int, list[int], list[int]]] = field(default_factory=list)
    states: list[StateSpec] = field(default_factory=list)  # hybrid: per slice, SWA/MAMBA
    state_loads: list[tuple[str, list[int], list[int]]] = field(default_factory=list)
    state_load: LaneEvent | None = None  # hybrid: the op loading them (before layer 0)
    state_backups: list[tuple[int, str, list[int], list[int]]] = field(default_factory=list)
    stores: list[tuple[int, list[int], tuple[str, ...]]] = field(default_factory=list)
    prefetches: list[tuple[PrefetchIntent, list[int]]] = field(default_factory=list)
    handle: PreparedBatchHandle | None = None


class TorchRuntime:
    """Implements :class:`hicache.runtime.interface.RuntimeInterface` (pool ``full`` only)."""

    def __init__(self, shape: ModelShape, *, page_size: int,
                 device_pages: Mapping[Kind | str, int], host_pages: Mapping[Kind | str, int],
                 device: str = "cpu", io_backend: str = "direct",
                 mem_layout: str = "layer_first", layerwise: bool = True,
                 l3: L3Store | None = None, runtime_id: str = "torch0",
                 timeline: Timeline | None = None, seed: int = 0, generation: int = 0,
                 max_requests: int = 4096, l3_policy: RetryPolicy | None = None,
                 wait_timeout_s: float = WAIT_TIMEOUT_S, warm_up: bool = True,
                 writeback: WritebackConfig | str | None = None) -> None:
        try:
            device_pages, host_pages = pools_of(device_pages), pools_of(host_pages)
        except ValueError:
            raise ValueError(f"TorchRuntime pools: 'full', 'swa', 'mamba' on each tier; "
                             f"got {device_pages} and {host_pages}") from None
        if shape.compression is not None:
            raise ValueError(f"model {shape.name!r}: compression: the torch runtime holds "
                             "plain K/V pages, not compressed KV (simulate this model)")
        self.shape, self.page_size = shape, page_size
        self.runtime_id, self.generation = runtime_id, generation
        self.lanes = Lanes(device, wait_timeout_s)
        self.fences = PageFences()
        dtype = torch.bfloat16 if self.lanes.cuda else torch.float32
        self.state = StateData(shape, device_pages, page_size, runtime_id, generation, dtype,
                               device, self.fences, wait_timeout_s)
        # with state pools the full pool holds the full-attention layers only
        L = shape.layer_kinds.count("full") if self.state.active else shape.num_layers
        self.kv_layers = L
        # hybrid: the full pool holds the full layers only, so FULL loads are one op over
        # them (its layers are not the model's); layer 0 waits for it
        self.layerwise = layerwise and not self.state.active
        ps, h, d = page_size, shape.kv_heads_per_rank, shape.head_dim
        full_dev, full_host = device_pages.get(Kind.FULL, 0), host_pages.get(Kind.FULL, 0)
        self.dev = DevicePool(L, full_dev, ps, h, d, dtype, device)
        self.host = HostPool(mem_layout, L, full_host, ps, h, d, dtype, pin=self.lanes.cuda)
        self.allocs = {(Tier.DEVICE, Kind.FULL): PageAllocator(full_dev, "L1", wait_timeout_s),
                       (Tier.HOST, Kind.FULL): PageAllocator(full_host, "L2", wait_timeout_s),
                       **{(Tier.DEVICE, p): a for p, a in self.state.allocs.items()}}
        self.state_host = StateHost(shape, self.state, host_pages, mem_layout, page_size,
                                    dtype, self.lanes.cuda, wait_timeout_s)
        self.allocs.update({(Tier.HOST, p): a for p, a in self.state_host.allocs.items()})
        self.dev_alloc = self.allocs[(Tier.DEVICE, Kind.FULL)]
        self.host_alloc = self.allocs[(Tier.HOST, Kind.FULL)]
        self.table = ReqToTokenTable(runtime_id, max_requests, generation)
        self.mover = Mover(self.dev, self.host, io_backend)
        self.model = (HybridModel if self.state.active else SyntheticModel)(
            shape, device, dtype, seed)
        self.timeline = timeline if timeline is not None else Timeline()
        self.outbox = Outbox(self.timeline, wait_timeout_s)
        self.l3 = _guarded(l3, l3_policy, self.dev.bytes_per_page_layer * L)
        self.writeback = TorchWriteback(  # when D2H backups run (runtime-owned policy)
            make_policy(writeback), self.lanes, self.mover, self.outbox,
            self.dev.bytes_per_page_layer * L, range(L), self.outbox.record)
        self.outputs: dict[int, torch.Tensor] = {}  # rid -> last hidden state (tests)
        self.tokens: dict[int, torch.Tensor] = {}  # rid -> last sampled token id
        self.batch_specs: dict[int, list[tuple[int, int]]] = {}  # batch -> (new, context)s
        self._prepared: dict[int, _Prepared] = {}
        self._closed = False
        if warm_up and not self.state.active:  # a hybrid batch needs its state rows
            self.warm_up()

    def warm_up(self, tokens: int = 64) -> None:
        """Engine start-up: a prefill, a decode step and a copy each way through the lanes,
        once (kernels loaded, allocator, caches and interpreter warm), so the first batches
        of a run are steady state as in a serving engine after its start-up, not a cold
        start no cost model should carry. Nothing is recorded; every page is freed."""
        ps, L = self.page_size, self.shape.num_layers
        n = -(-(tokens + 1) // ps)
        if self.dev_alloc.num_free < n:
            return
        pages = self.dev_alloc.alloc(n)
        evs: list[LaneEvent] = []
        for ctx, new in ((0, tokens), (tokens, 1)):
            idx = BatchIndex([SliceSpec(-1, ctx, new, tuple(pages))], ps)
            state: dict[str, Any] = {}
            evs += [self.lanes["compute"].submit(partial(self._layer, i, state, idx))
                    for i in range(L)]
            evs.append(self.lanes["compute"].submit(partial(self._sample, state, idx)))
        if self.host_alloc.num_free >= 1:
            host = self.host_alloc.alloc(1)
            evs.append(self.lanes["d2h"].submit(partial(self.mover.d2h, pages[:1], host,
                                                        range(L)), [evs[-1]]))
            evs.append(self.lanes["h2d"].submit(partial(self.mover.h2d, pages[:1], host,
                                                        range(L)), [evs[-1]]))
            evs[-1].wait(120)
            self.host_alloc.free(host)
        self.lanes.drain(120)
        self.dev_alloc.free(pages)
        self.outputs.pop(-1, None)
        self.tokens.pop(-1, None)
        err = next((e.error for e in evs if e.error is not None), None)
        if err is not None:
            raise RuntimeError(f"runtime warm-up failed: {err!r}") from err

    # ---- RuntimeInterface -------------------------------------------------------------
    def info(self) -> RuntimeInfo:
        page = {Kind.FULL: self.dev.bytes_per_page_layer * self.kv_layers}
        if self.state.window:
            page[Kind.SWA] = self.state.swa.bytes_per_page_layer * self.state.swa.num_layers
        if self.state.mamba:
            page[Kind.MAMBA] = self.state.state[0].numel() * self.state.state.element_size()
        return RuntimeInfo(self.runtime_id, self.generation, self.page_size,
                           {pool: a.num_pages for (tier, pool), a in self.allocs.items()
                            if tier is Tier.DEVICE},
                           {pool: a.num_pages for (tier, pool), a in self.allocs.items()
                            if tier is Tier.HOST}, page,
                           self.shape.num_layers, swa_window=self.state.window,
                           mamba=self.state.mamba)

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        """Atomic: :meth:`_validate` checks every handle, free, release and the capacity
        (counting what the frees and releases return) before anything changes. The
        driver thread's time in it is a ``cpu`` row (as ``execute``)."""
        t0 = self.lanes.clock.now()
        handle = self._prepare(plan)
        self.outbox.record_span("cpu", "prepare", t0, self.lanes.clock.now(), plan.batch_id)
        return handle

    def _prepare(self, plan: BatchPlan) -> PreparedBatchHandle:
        if plan.batch_id in self._prepared:
            raise ValueError(f"batch {plan.batch_id} is already prepared")
        self._validate(plan)
        prep = _Prepared(plan.batch_id)
        # a freed page waits only for the in-flight ops that use it (gpu_backend.page_fences):
        # the next batch's loads never wait for a running batch that does not touch them
        for ext in plan.frees:
            pages = list(ext.pages())
            self._alloc(ext.tier, ext.pool).free(
                pages, self.fences.fence(ext.tier, pages, ext.pool))
        for rel in plan.releases:
            row = self.table.close(rel.request)
            pages = self._released(row, rel)
            self.dev_alloc.free(pages, self.fences.fence(Tier.DEVICE, pages))
            if self.state.active:  # freed once this batch has run (StateData.flush)
                self.state.keeper.release(rel.request.slot_id, rel.kept())
        slices, load_dev, load_host = self._open_slices(plan, prep)
        if prep.state_loads:
            self._start_state_loads(prep)
        if load_dev:
            self._start_loads(prep, load_dev, load_host)
        host_exts = []
        for b in plan.backups:
            dev_pages = list(b.src.pages())
            host_pages = self._alloc(Tier.HOST, b.src.pool).alloc(len(dev_pages))
            if b.src.pool is Kind.FULL:
                prep.backups.append((b.job_id, dev_pages, host_pages))
            else:  # a hybrid state component's copy
                prep.state_backups.append((b.job_id, b.src.pool, dev_pages, host_pages))
            host_exts.append(self._extent(Tier.HOST, host_pages, b.src.pool))
        prep.stores = [(s.job_id, list(s.src.pages()), s.keys) for s in plan.stores]
        prep.prefetches = [(p, self.host_alloc.alloc(p.max_pages)) for p in plan.prefetches]
        prep.handle = PreparedBatchHandle(self.runtime_id, self.generation, plan.batch_id,
                                          tuple(slices), tuple(host_exts))
        self._prepared[plan.batch_id] = prep
        return prep.handle

    def execute_batch(self, handle: PreparedBatchHandle) -> None:
        t0 = self.lanes.clock.now()
        self._execute(handle)
        self.outbox.record_span("cpu", "execute", t0, self.lanes.clock.now(), handle.batch_id)

    def _execute(self, handle: PreparedBatchHandle) -> None:
        if handle.runtime_id != self.runtime_id or handle.generation != self.generation:
            raise StaleHandleError(f"batch handle of {handle.runtime_id!r} gen "
                                   f"{handle.generation} presented to {self.runtime_id!r} "
                                   f"gen {self.generation}")
        prep = self._prepared.get(handle.batch_id)
        if prep is None or prep.handle != handle:  # by value: a handle may cross a process
            raise ValueError(f"batch {handle.batch_id} was not prepared or already executed")
        del self._prepared[handle.batch_id]
        done = self._queue_compute(prep)
        self.fences.use(Tier.DEVICE, (p for s in prep.specs for p in s.pages), done)
        if self.state.active:
            self.state.use(prep.states, done)
            self.state.flush()
        bid = prep.batch_id
        if prep.backups:
            dev = [p for _, d, _ in prep.backups for p in d]
            host = [p for _, _, h in prep.backups for p in h]
        if prep.backups and self.writeback.policy.chunked:
            ev = self.writeback.submit(bid, prep.backups, done)
            self.fences.use(Tier.DEVICE, dev, ev)
            self.fences.use(Tier.HOST, host, ev)
        elif prep.backups:
            dev = [p for _, d, _ in prep.backups for p in d]
            host = [p for _, _, h in prep.backups for p in h]
            nbytes = len(dev) * self.info().bytes_per_page[Kind.FULL]

            def backed_up(ev: LaneEvent) -> None:
                for job, d, _ in prep.backups:
                    self.outbox.post(TransferCompletion(job, TransferKind.BACKUP, ev.end, len(d)))

            ev = self._submit("d2h", partial(self.mover.d2h, dev, host,
                                             range(self.kv_layers)),
                              [done], "backup", bid, nbytes=nbytes, then=[backed_up])
            self.fences.use(Tier.DEVICE, dev, ev)
            self.fences.use(Tier.HOST, host, ev)
        if prep.state_backups:
            self._state_backups(prep, done)
        for job, pages, keys in prep.stores:
            ev = self._l3_job("store", bid, partial(self._store, job, pages, keys))
            self.fences.use(Tier.HOST, pages, ev)
        for intent, reserved in prep.prefetches:
            ev = self._l3_job("prefetch", bid, partial(self._prefetch, intent, reserved))
            self.fences.use(Tier.HOST, reserved, ev)

    def poll(self) -> list[Completion]:
        return self.outbox.take(0.0)

    # ---- driver helpers ---------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> list[Completion]:
        """Block until at least one completion arrived (or ``timeout``), then poll. With
        ``timeout`` None, also return ([]) once everything queued has finished: nothing more
        can arrive (lane callbacks post before their event is done)."""
        if timeout is not None:
            return self.outbox.take(timeout)
        fence = self.lanes.fence()
        while True:
            got = self.outbox.take(0.05)
            if got or all(ev.is_done() for ev in fence):
                return got + self.outbox.take(0.0)

    def now(self) -> float:
        return self.lanes.clock.now()

    def record_host(self, op: str, start: float, end: float) -> None:
        """A ``cpu`` timeline row for the driver thread's own work (its scheduler steps)."""
        self.outbox.record_span("cpu", op, start, end, -1)

    def l3_faults(self) -> dict[str, int]:
        """The L3 fault counters (``gpu_backend.l3.faults.COUNTERS``); {} without an L3."""
        faults = getattr(self.l3, "faults", None)
        return faults.as_dict() if faults is not None else {}

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has finished."""
        return self.lanes.drain(timeout)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.lanes.close()

    def __enter__(self) -> TorchRuntime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals --------------------------------------------------------------------
    def _alloc(self, tier: Tier, pool: Kind = Kind.FULL) -> PageAllocator:
        alloc = self.allocs.get((tier, pool))
        if alloc is None:
            raise ValueError(f"the runtime holds no {tier.value} pages of pool '{pool}'")
        return alloc

    def _extent(self, tier: Tier, pages: list[int], pool: Kind = Kind.FULL
                ) -> CacheExtentRef:
        return CacheExtentRef(self.runtime_id, self.generation, tier, coalesce(pages), pool)

    def _check(self, ext: CacheExtentRef, tier: Tier, what: str, state: bool = False
               ) -> None:
        """``ext`` is this runtime's, on ``tier``, allocated; of pool 'full' (or, with
        ``state``, of a state pool this runtime keeps)."""
        check_generation(ext, self.runtime_id, self.generation, what)
        if ext.tier is not tier or (ext.pool is not Kind.FULL and not state):
            raise ValueError(f"{what}: expected a {tier} 'full' extent, got {ext.tier}/{ext.pool}")
        self._alloc(tier, ext.pool).check_allocated(ext.pages(), what)

    @staticmethod
    def _released(row: Any, rel: Release) -> list[int]:
        keep = {p for e in rel.kept() if e.pool is Kind.FULL for p in e.pages()}
        return [p for p in row.owned if p not in keep]

    def _validate(self, plan: BatchPlan) -> None:
        """Every handle, free, release and the capacity of the plan, before anything
        changes (prepare is atomic). Raises StaleHandleError, CapacityError or ValueError."""
        for ext in plan.frees:
            check_generation(ext, self.runtime_id, self.generation, "free")
            self._check(ext, ext.tier, "free", state=True)
        released: dict[int, list[int]] = {}
        for rel in plan.releases:
            row = self.table.get(rel.request)
            for keep in rel.kept():
                self._check(keep, Tier.DEVICE, "release.keep", state=True)
                ok = (set(keep.pages()) <= set(row.pages) if keep.pool is Kind.FULL else
                      self.state.keeper.check_keep(rel.request.slot_id, keep))
                if not ok:
                    raise ValueError(f"release of rid {row.rid} keeps pages it does not hold")
            if rel.request.slot_id in released:
                raise ValueError(f"batch {plan.batch_id} releases rid {row.rid} twice")
            released[rel.request.slot_id] = self._released(row, rel)
        self._check_frees_once(plan, released)
        rows = 0
        for s in plan.slices:
            if s.request is not None:
                row = self.table.get(s.request)
                if s.attach or s.loads:
                    raise ValueError(f"rid {s.rid}: attach/loads only on the first slice")
                if s.request.slot_id in released:
                    raise ValueError(f"batch {plan.batch_id} both releases and continues "
                                     f"rid {s.rid}")
                tokens = row.tokens
            else:
                rows += 1
                tokens = (sum(e.num_pages for e in s.attach if e.pool is Kind.FULL)
                          + sum(ld.src.num_pages for ld in s.loads)) * self.page_size
            if tokens != s.context_tokens or s.new_tokens <= 0:
                raise ValueError(f"rid {s.rid}: row holds {tokens} tokens, slice says "
                                 f"context {s.context_tokens} + new {s.new_tokens}")
            check_state_attach(s.attach, f"rid {s.rid}")
            for ext in s.attach:  # hybrid state pieces may be on L2 (loaded back)
                self._check(ext, ext.tier, f"rid {s.rid} attach", state=True)
            for load in s.loads:
                self._check(load.src, Tier.HOST, f"rid {s.rid} load")
        for b in plan.backups:
            self._check(b.src, Tier.DEVICE, f"backup job {b.job_id}", state=True)
        for st in plan.stores:
            self._check(st.src, Tier.HOST, f"store job {st.job_id}")
            if len(st.keys) != st.src.num_pages:
                raise ValueError(f"store job {st.job_id}: {len(st.keys)} keys for "
                                 f"{st.src.num_pages} pages")
        for job, keys in [*((s.job_id, s.keys) for s in plan.stores),
                          *((p.job_id, p.keys) for p in plan.prefetches)]:
            if keys and type(keys[0]) is not str:  # real stores take SGLang's keys
                raise ValueError(f"L3 job {job}: {type(keys[0]).__name__} keys; the torch "
                                 f"runtime's stores take SHA-256 hex keys "
                                 f"(cache.l3_key_scheme: sha256)")
        if (plan.stores or plan.prefetches) and self.l3 is None:
            raise ValueError("plan has stores or prefetches but the runtime has no l3")
        self._check_capacity(plan, released, rows)

    def _check_frees_once(self, plan: BatchPlan, released: dict[int, list[int]]) -> None:
        reads: dict[tuple[Tier, Kind], set[int]] = {}
        for src in [b.src for b in plan.backups] + [s.src for s in plan.stores]:
            reads.setdefault((src.tier, src.pool), set()).update(src.pages())
        seen: dict[tuple[Tier, Kind], set[int]] = {}
        for key, pages in [*(((e.tier, e.pool), list(e.pages())) for e in plan.frees),
                           *(((Tier.DEVICE, Kind.FULL), pages) for pages in released.values())]:
            if reads.get(key, set()).intersection(pages):
                raise ValueError("plan frees pages that its own backups or stores read")
            done = seen.setdefault(key, set())
            if done.intersection(pages) or len(set(pages)) != len(pages):
                raise ValueError(f"batch {plan.batch_id} frees a {key[0].value} page twice")
            done.update(pages)

    def _check_capacity(self, plan: BatchPlan, released: dict[int, list[int]],
                        rows: int) -> None:
        need: Counter[tuple[Tier, Kind]] = Counter()
        for s in plan.slices:
            have = (len(self.table.get(s.request).pages) if s.request is not None else
                    sum(e.num_pages for e in s.attach if e.pool is Kind.FULL))
            loads = sum(ld.src.num_pages for ld in s.loads)
            new = max(0, -(-(s.context_tokens + s.new_tokens) // self.page_size) - have - loads)
            need[(Tier.DEVICE, Kind.FULL)] += loads + new
            if self.state.active:
                for pool, n in self.state.keeper.needs(s, new).items():
                    need[(Tier.DEVICE, pool)] += n
            for ext in s.attach:
                if ext.tier is Tier.HOST:  # a hybrid state load
                    need[(Tier.DEVICE, ext.pool)] += ext.num_pages
        for b in plan.backups:
            need[(Tier.HOST, b.src.pool)] += b.src.num_pages
        need[(Tier.HOST, Kind.FULL)] += sum(p.max_pages for p in plan.prefetches)
        back: Counter[tuple[Tier, Kind]] = Counter()  # what the frees and releases return
        for e in plan.frees:
            back[(e.tier, e.pool)] += e.num_pages
        back[(Tier.DEVICE, Kind.FULL)] += sum(len(p) for p in released.values())
        if self.state.active:  # state pages a release frees come back after the batch
            for rel in plan.releases:
                for pool, n in self.state.keeper.releasable(rel.request.slot_id,
                                                            rel.kept()).items():
                    back[(Tier.DEVICE, pool)] += n
        for (tier, pool), n in need.items():
            free = self._alloc(tier, pool).num_free + back[(tier, pool)]
            if n > free:
                raise CapacityError(f"batch {plan.batch_id} needs {n} {tier.value} pages "
                                    f"of pool '{pool}', {free} free (not accounted for)")
        slots = self.table.free_slots + len(released)
        if rows > slots:
            raise CapacityError(f"batch {plan.batch_id} opens {rows} request rows, {slots} free")

    def _open_slices(self, plan: BatchPlan, prep: _Prepared
                     ) -> tuple[list[PreparedSlice], list[int], list[int]]:
        out, load_dev, load_host = [], [], []
        for s in plan.slices:
            loaded = []
            copy_in, fresh = -1, False
            if s.request is None:
                handle, row = self.table.open(s.rid)
                for ext in s.attach:
                    if ext.pool is Kind.FULL:
                        row.pages += list(ext.pages())
                if self.state.active:
                    attach, copies, landed = state_loads(
                        s.attach, lambda pool, n: self.state.allocs[pool].alloc(n),
                        self.runtime_id, self.generation)
                    prep.state_loads += copies
                    self.state.keeper.open(handle.slot_id, attach,
                                           sum(ld.src.num_pages for ld in s.loads))
                    ckpt = [e for e in attach if e.pool is Kind.MAMBA]
                    copy_in = next(ckpt[0].pages()) if ckpt else -1
                    fresh = self.state.mamba and not ckpt
                for load in s.loads:
                    host_pages = list(load.src.pages())
                    dev_pages = self.dev_alloc.alloc(len(host_pages))
                    load_dev += dev_pages
                    load_host += host_pages
                    row.pages += dev_pages
                    loaded.append(self._extent(Tier.DEVICE, dev_pages))
                if self.state.active:
                    loaded += landed
                row.tokens = len(row.pages) * self.page_size
            else:
                handle, row = s.request, self.table.get(s.request)
            total = s.context_tokens + s.new_tokens
            need = -(-total // self.page_size) - len(row.pages)
            pages = self.dev_alloc.alloc(need) if need > 0 else []
            row.pages += pages
            row.owned += pages
            row.tokens = total
            state: tuple[CacheExtentRef, ...] = ()
            if self.state.active:
                state, spec = self.state.advance(handle.slot_id, s, len(row.pages), pages,
                                                 copy_in, fresh)
                prep.states.append(spec)
            prep.specs.append(SliceSpec(s.rid, s.context_tokens, s.new_tokens, tuple(row.pages)))
            out.append(PreparedSlice(s.rid, handle, self._extent(Tier.DEVICE, row.pages),
                                     tuple(loaded), state))
        prep.op = "prefill" if any(s.phase is Phase.PREFILL for s in plan.slices) else "decode"
        prep.finished = tuple(s.rid for s in plan.slices if s.finishes)
        return out, load_dev, load_host

    def _start_loads(self, prep: _Prepared, dev: list[int], host: list[int]) -> None:
        L = self.kv_layers
        groups = [range(i, i + 1) for i in range(L)] if self.layerwise else [range(L)]
        for r in groups:
            nbytes = len(dev) * self.dev.bytes_per_page_layer * len(r)
            layer = r.start if len(r) == 1 else -1
            prep.loads.append(self._submit("h2d", partial(self.mover.h2d, dev, host, r), [],
                                           "load", prep.batch_id, layer=layer, nbytes=nbytes))
        self.fences.use(Tier.DEVICE, dev, prep.loads[-1])  # one lane: the last op is last
        self.fences.use(Tier.HOST, host, prep.loads[-1])

    def _start_state_loads(self, prep: _Prepared) -> None:
        """Hybrid load-back: the SWA pages and MAMBA checkpoints the batch attaches from
        L2, in one h2d op before the FULL loads (layer 0 waits for it)."""
        copies, bid = prep.state_loads, prep.batch_id
        ev = self._submit("h2d", partial(self.state_host.load, copies), [], "load", bid,
                          nbytes=self.state_host.nbytes(copies))
        for pool, host, dev in copies:
            self.fences.use(Tier.DEVICE, dev, ev, pool)
            self.fences.use(Tier.HOST, host, ev, pool)
        prep.state_load = ev

    def _state_backups(self, prep: _Prepared, done: LaneEvent) -> None:
        """Hybrid backups of SWA pages and MAMBA checkpoints: one d2h op after compute."""
        copies = [(pool, dev, host) for _, pool, dev, host in prep.state_backups]

        def backed_up(ev: LaneEvent) -> None:
            for job, _, dev, _ in prep.state_backups:
                self.outbox.post(TransferCompletion(job, TransferKind.BACKUP, ev.end, len(dev)))

        ev = self._submit("d2h", partial(self.state_host.backup, copies), [done], "backup",
                          prep.batch_id, nbytes=self.state_host.nbytes(copies),
                          then=[backed_up])
        for pool, dev, host in copies:
            self.fences.use(Tier.DEVICE, dev, ev, pool)
            self.fences.use(Tier.HOST, host, ev, pool)

    def _queue_compute(self, prep: _Prepared) -> LaneEvent:
        bid, finished = prep.batch_id, prep.finished
        if not prep.specs:
            def empty(ev: LaneEvent) -> None:
                self.writeback.step_done(bid, ev.start, ev.end, 0)
                self.outbox.post(BatchCompletion(bid, ev.start, ev.end, ()))
            return self.lanes["compute"].submit(lambda: None, [], [empty, self.outbox.check])
        idx = (HybridIndex(prep.specs, prep.states, self.page_size, self.state.window)
               if self.state.active else BatchIndex(prep.specs, self.page_size))
        self.batch_specs[bid] = [(sp.new, sp.context) for sp in prep.specs]
        state: dict[str, Any] = {}
        first: LaneEvent | None = None
        decode = len(prep.specs) if prep.op == "decode" else 0
        for layer in range(self.shape.num_layers):
            waits = [prep.loads[layer if self.layerwise else 0]] if prep.loads else []
            if layer == 0 and prep.state_load is not None:
                waits.append(prep.state_load)
            ev = self._submit("compute", partial(self._layer, layer, state, idx), waits,
                              prep.op, bid, layer=layer)
            first = first or ev

        def finish(e: LaneEvent, first_ev: LaneEvent = first) -> None:
            self.writeback.step_done(bid, first_ev.start, e.end, decode)
            self.outbox.post(BatchCompletion(bid, first_ev.start, e.end, finished))

        return self._submit("compute", partial(self._sample, state, idx), [], "sample", bid,
                            then=[finish])

    def _layer(self, layer: int, state: dict[str, Any], idx: BatchIndex) -> None:
        hybrid = isinstance(idx, HybridIndex)
        if layer == 0:  # calibrated as "embed" (gpu_backend.calib_compute)
            idx.to(self.dev.kv.device)
            idx.mask  # noqa: B018 - built on the device, once per batch
            state["x"] = self.model.embed_tokens(idx)
            if hybrid:  # copy-on-write of attached checkpoints, fresh slots zeroed
                copy_states(self.state, idx.states, before=True)
        if hybrid:
            state["x"] = self.model.forward_hybrid(layer, state["x"], idx, self.dev,
                                                   self.state)
        else:
            state["x"] = self.model.forward_layer(layer, state["x"], idx, self.dev)

    def _sample(self, state: dict[str, Any], idx: BatchIndex) -> None:
        """LM head and greedy sampling of every request's last row (one op per batch);
        a hybrid batch first copies the checkpoints its slices ask for."""
        if isinstance(idx, HybridIndex):
            copy_states(self.state, idx.states, before=False)
        last, tokens = self.model.sample(state.pop("x"), idx)
        for i, rid in enumerate(idx.rids):
            self.outputs[rid] = last[i]
            self.tokens[rid] = tokens[i]

    def _submit(self, lane: str, fn: Any, waits: list[LaneEvent | None], op: str, batch: int,
                *, layer: int = -1, nbytes: int | list[int] = 0, then: list | None = None
                ) -> LaneEvent:
        def rec(ev: LaneEvent) -> None:
            n = nbytes[0] if isinstance(nbytes, list) else nbytes
            self.outbox.record(ev, op, batch=batch, layer=layer, nbytes=n)
        return self.lanes[lane].submit(fn, waits, [rec, *(then or []), self.outbox.check])

    def _l3_job(self, op: str, batch: int, job: Any) -> LaneEvent:
        result: dict[str, Any] = {"bytes": [0]}
        return self._submit("l3", partial(job, result), [self.lanes["d2h"].last], op, batch,
                     nbytes=result["bytes"], then=[lambda ev: self.outbox.post(
                         result["completion"](ev.end))])

    def _store(self, job: int, pages: list[int], keys: tuple[str, ...],
               result: dict[str, Any]) -> None:
        assert self.l3 is not None
        n, result["bytes"][0] = store_pages(self.l3, self.host, pages, keys)
        result["completion"] = partial(_transfer, job, TransferKind.STORE, pages=n)

    def _prefetch(self, p: PrefetchIntent, reserved: list[int], result: dict[str, Any]) -> None:
        assert self.l3 is not None
        hits = count_hits(self.l3, p.keys, p.batch_pages)
        n = 0
        if hits >= max(1, p.min_hit_pages):
            want = min(hits, p.max_pages)
            n, result["bytes"][0] = fetch_pages(self.l3, self.host, p.keys[:want],
                                                reserved[:want], p.batch_pages)
        self.host_alloc.free(reserved[n:])
        ext = self._extent(Tier.HOST, reserved[:n]) if n else None
        result["completion"] = partial(_transfer, p.job_id, TransferKind.PREFETCH, pages=n,
                                       extent=ext, hit_pages=hits)


def _transfer(job: int, kind: TransferKind, end: float, **kw: Any) -> TransferCompletion:
    return TransferCompletion(job, kind, end, **kw)


def _guarded(l3: L3Store | None, policy: RetryPolicy | None, page_bytes: int
             ) -> L3Store | None:
    """``l3`` behind checksums and deadlines, unless it already is (or there is none)."""
    if l3 is None or getattr(l3, "faults", None) is not None:
        return l3
    from gpu_backend.l3 import guard

    return guard(l3, policy, page_bytes)
