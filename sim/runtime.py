"""SimRuntime: the RuntimeInterface over a SimPy model of one GPU, its host and L3.

Invariants: all time is ``env.now``; prepare_batch places pages (per-pool free lists) and
starts layer-wise H2D loads at once (as soon as the host issued them, :mod:`sim.host`), so
loads of batch N+1 overlap compute of batch N; execute_batch queues compute after earlier
batches (each op once the host launched it), the LM head and sampling, then one D2H backup
copy per batch; every handle is checked against (runtime_id, generation); bytes copied per
direction are counted by the link (``bytes_moved``) and, independently, from page counts at
prepare (``bytes_accounted``). ``batch_shapes`` records what each batch computed (tokens,
requests, context, load bytes) for residual plots.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from itertools import starmap

import simpy

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    RequestRuntimeHandle,
    Tier,
    check_generation,
    page_run,
    pools_of,
)
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    Completion,
    Phase,
    PreparedBatchHandle,
    PreparedSlice,
    Release,
    RequestSlice,
    RuntimeInfo,
)
from hicache.runtime.page_ids import Run, pages_of, runs_of
from hicache.runtime.state import StateKeeper, state_loads
from hicache.runtime.writeback import WritebackConfig
from hicache.tiers.l3_guard import RetryPolicy
from hicache.timeline import Timeline
from sim import compute_chain, detached, ops, steady, validate
from sim.batch import (
    BatchShapes,
    BatchState,
    GroupSteps,
    LoadGroup,
    PendingBackup,
    build_extent,
    build_handle,
    group_steps,
)
from sim.calibration import apply_copy_calibration
from sim.compute_chain import ComputeChain
from sim.copy_engine import CopyEngines
from sim.cost import CostModel
from sim.fluid import FluidServer
from sim.hardware.model import ModelPreset, load_model
from sim.hardware.profile import HardwareProfile, load_profile
from sim.host import HostLane, copy_calls, interpreter_on
from sim.interpreter import Interpreter
from sim.l3 import L3Store
from sim.l3_client import L3Client
from sim.link import PcieLink
from sim.load_chain import Landed, LoadChain, chain_possible
from sim.pending import PendingPages
from sim.pools import TierPools
from sim.rows import RequestRow
from sim.streams import Stream
from sim.writeback import Writeback, chunked_backup_op

_FULL, _DEVICE, _HOST = Kind.FULL, Tier.DEVICE, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)

# a load: (pool, pages, source runs, destination runs), runs as (start, length)
Load = tuple[Kind, int, list[Run], list[Run]]


class SimRuntime:
    # slotted: every event reads it, and from 30 attributes CPython 3.11 gives an instance
    # its own dict (a hashed lookup per read; ARCHITECTURE.md, RequestState)
    __slots__ = (
        '_chain_compute', '_chain_loads', '_completions', '_decode', '_groups', '_lowest',
        '_next_slot', '_one_layer', '_pending', '_prefilled', '_prepared', '_shapes', '_wake',
        'backup_throttle', 'batch_shapes', 'bytes_accounted', 'bytes_per_page', 'copies',
        'cost', 'device', 'device_sizes', 'env', 'fluid', 'fold_counts', 'fold_layers',
        'full', 'generation', 'host', 'host_lane', 'host_sizes', 'interpreter', 'l3',
        'l3_bytes', 'l3_client', 'layer_bytes', 'layers_touched', 'layerwise', 'link',
        'mamba', 'mem_layout', 'model', 'page_size', 'profile', 'rows', 'runtime_id', 'state',
        'state_active', 'state_copy_s', 'steady', 'streams', 'swa_window', 'timeline',
        'trace_layers', 'writeback'
    )

    def __init__(self, env: simpy.Environment, *, profile: HardwareProfile | str,
                 model: ModelPreset | str, page_size: int,
                 device_pages: Mapping[Kind | str, int],
                 host_pages: Mapping[Kind | str, int], l3: L3Store | None = None,
                 io_backend: str = "kernel", layerwise: bool = True,
                 mem_layout: str = "layer_first",
                 backup_throttle_bytes_per_s: float | None = None, runtime_id: str = "sim0",
                 timeline: Timeline | None = None, trace_layers: bool = False,
                 writeback: WritebackConfig | str | None = None,
                 l3_retry: RetryPolicy | None = None, fold_layers: bool = True) -> None:
        if page_size <= 0:
            raise ValueError("page_size must be > 0")
        device_pages, host_pages = pools_of(device_pages), pools_of(host_pages)
        if _FULL not in device_pages:
            raise ValueError("device_pages needs a 'full' pool (request KV lives there)")
        self.env = env
        if not isinstance(profile, HardwareProfile):
            profile = load_profile(profile)
        self.profile = apply_copy_calibration(profile)  # measured copy tables, if any
        self.model = model if isinstance(model, ModelPreset) else load_model(model)
        self.page_size, self.runtime_id = page_size, runtime_id
        self.device_sizes, self.host_sizes = dict(device_pages), dict(host_pages)
        self.l3, self.layerwise, self.trace_layers = l3, layerwise, trace_layers
        # the host layout decides how many copy calls a page run costs (sim.host)
        self.mem_layout = "page_first" if mem_layout.startswith("page_first") else "layer_first"
        self.backup_throttle = backup_throttle_bytes_per_s
        self.writeback = Writeback(writeback)  # when D2H backups run (runtime-owned policy)
        self._decode: dict[int, int] = {}  # executed batch id -> decode batch size (or 0)
        self._prefilled: set[int] = set()  # executed, uncompleted batches that prefill
        self.timeline = timeline if timeline is not None else Timeline()
        self.cost = CostModel(self.profile, self.model)
        self.link = PcieLink(self.profile)
        # the CPU runtime's threads share one interpreter lock (sim.interpreter)
        self.interpreter = interpreter_on(self.profile)
        spec = self.profile.host_cpu.interpreter
        self.fluid = (FluidServer(env, Interpreter(spec, self.link.allocate).allocate)
                      if self.interpreter and spec else
                      FluidServer(env, self.link.allocate, solo=self.link.solo_rate,
                                  shift=self.link.shift_rate))
        self.copies = CopyEngines(env, self.profile, self.link, self.fluid, io_backend,
                                  gil_calls=self.interpreter)
        self.copies.timeline = self.timeline
        self.streams = {n: Stream(env, n) for n in ("compute", "h2d", "d2h")}
        self.host_lane = HostLane(env, self.profile, self.cost, self.timeline, self.fluid)
        self.streams["cpu"] = self.host_lane.stream
        self.batch_shapes = BatchShapes()
        self._shapes = self.batch_shapes.rows  # (_record_shape)
        self.layer_bytes = self._layer_bytes(set(device_pages) | set(host_pages))
        self.bytes_per_page = {p: sum(b) for p, b in self.layer_bytes.items()}
        self.layers_touched = {p: sum(1 for x in b if x) for p, b in self.layer_bytes.items()}
        self.bytes_accounted = {"h2d": 0, "d2h": 0}
        self.l3_bytes = {"read": 0, "write": 0}
        self.l3_client: L3Client | None = None  # this replica's NIC and guarded L3 calls
        if l3 is not None:
            l3.attach(runtime_id)
            self.l3_client = L3Client(env, l3, self.fluid, self.timeline, policy=l3_retry)
            self.link.l3 = self.l3_client
        m = self.model
        self.swa_window = (m.sliding_window if Kind.SWA in device_pages
                           and (m.count("swa") or m.windowed) else 0)
        self.mamba = Kind.MAMBA in device_pages and m.count("mamba") > 0
        self.state_copy_s = m.mamba_state_bytes_per_request() / self.profile.gpu.hbm_bytes_per_s
        self._chain_loads = chain_possible(self)
        self._one_layer = tuple(range(i, i + 1) for i in range(self.model.num_layers))
        # layer-wise load groups by what decides them (_load_groups): batches that load
        # the same page and call counts share one tuple of (frozen) groups
        self._groups: dict[tuple[tuple[Kind, int, int], ...],
                           tuple[tuple[LoadGroup, ...], GroupSteps]] = {}
        # layer-wise chains fold into one event each (sim.chain_fold, sim.tail_fold);
        # what the folds did: tried, folded, interrupted, ... (instrumentation, tests)
        self.fold_layers = fold_layers
        self.fold_counts: Counter[str] = Counter()
        self._chain_compute = compute_chain.chain_possible(self)
        self.generation = 0
        self.restart()

    def _layer_bytes(self, pools: set[Kind]) -> dict[Kind, tuple[int, ...]]:
        """Bytes one page of each pool holds in each layer. SWA layers' KV is a sidecar of
        FULL pages unless an SWA pool exists; a MAMBA page is one request's state (the
        model names its layers' kinds: "full", "swa", "mamba")."""
        m, ps = self.model, self.page_size
        out = {_FULL: m.layer_page_bytes(("full",) if Kind.SWA in pools
                                             else ("full", "swa"), ps)}
        if Kind.SWA in pools:
            out[Kind.SWA] = m.swa_page_bytes(ps)
        if Kind.MAMBA in pools:
            out[Kind.MAMBA] = tuple(m.mamba_state_bytes if k == "mamba" else 0
                                    for k in m.layer_kinds)
        return out

    def restart(self) -> None:
        """New generation: empty pools and rows; every earlier handle becomes stale."""
        self.generation += 1
        if getattr(self, "_wake", None) is not None and not self._wake.triggered:
            self._wake.succeed()  # a driver waiting on the old generation wakes and re-reads
        order = "lifo" if "page_order" in self.profile.ablate else "lowest"
        self._lowest = order == "lowest"  # (apply_frees: a pool's frees in one call)
        self.device = TierPools(_DEVICE, self.device_sizes, order)
        self.host = TierPools(_HOST, self.host_sizes, order)
        self.rows: dict[int, RequestRow] = {}
        self.state = StateKeeper(self.device, self.runtime_id, self.generation, self.page_size,
                                 self.swa_window, self.mamba, self.state_copy_s)
        # read once a plan or more (hot): the L1 FULL pool, and whether state pools are
        # kept (StateKeeper.active, fixed for its life: the runtime's window and mamba)
        self.full = self.device[_FULL]
        self.state_active = self.state.active
        self._next_slot = 0
        # the rows of the last placed all-decode plan, for the next plan to match
        # (sim.steady); dropped by any release (and here: every row is new)
        self.steady: steady.SteadyRows | None = None
        self._prepared: dict[int, BatchState] = {}
        self._pending: dict[Kind, PendingPages] = {}  # pool -> L2 pages -> their backups
        self._completions: list[Completion] = []
        # what completion_event handed out (None: nothing yet since the last completion,
        # so nothing waits: a completion then schedules no wake-up that no one reads)
        self._wake: simpy.Event | None = None

    # ---- RuntimeInterface -------------------------------------------------------------
    def info(self) -> RuntimeInfo:
        return RuntimeInfo(self.runtime_id, self.generation, self.page_size,
                           dict(self.device_sizes), dict(self.host_sizes),
                           dict(self.bytes_per_page), self.model.num_layers,
                           swa_window=self.swa_window, mamba=self.mamba)

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        if plan.batch_id in self._prepared:
            raise ValueError(f"batch {plan.batch_id} is already prepared")
        if self.steady is not None and not (plan.frees or plan.releases or plan.backups
                                            or plan.stores or plan.prefetches):
            handle = self._prepare_steady(plan)
            if handle is not None:
                return handle
        checked = self.apply_frees(plan)
        st = BatchState(plan, None, self.generation)  # type: ignore[arg-type]
        st.finished = tuple([s.rid for s in plan.slices if s.finishes])
        loads: list[Load] = []
        h2d = self.bytes_accounted["h2d"]  # each load adds its pages' bytes to it
        slices = self._place_slices(plan, checked, st, loads)
        if loads:
            st.load_groups, st.load_steps = self._load_groups(loads)
        self.host_lane.prepare(st, len(plan.slices),
                               [g.calls if g.nbytes else 0 for g in st.load_groups]
                               if loads else (), admits=bool(st.prefills))
        if loads:
            self._start_loads(st)
        if plan.backups:
            st.backups = []
        for b in plan.backups:
            pool, n = b.src.pool, b.src.num_pages
            runs = self.host[pool].allocate_runs(n)
            ext = self._extent(_HOST, runs, pool)
            pending = PendingBackup(b, ext, b.src.runs(), runs, self.env.event())
            st.backups.append(pending)  # type: ignore[attr-defined]  # the list above
            waits = self._pending.get(pool)
            if waits is None:
                waits = self._pending[pool] = PendingPages()
            waits.add(runs, pending.done)
            self.bytes_accounted["d2h"] += n * self.bytes_per_page[pool]
        # the loads' bytes: what their groups hold, summed layer by layer (integers)
        self._record_shape(st, self.bytes_accounted["h2d"] - h2d if loads else 0)
        for pf in plan.prefetches:
            reserved = self.host[_FULL].allocate_runs(pf.max_pages)
            detached.start(self.env, ops.prefetch_op(self, pf, reserved, self.generation))
        st.handle = build_handle(self.runtime_id, self.generation, plan.batch_id, slices,
                                 tuple([b.dst for b in st.backups]) if st.backups
                                 else ())
        self._prepared[plan.batch_id] = st
        return st.handle

    def _prepare_steady(self, plan: BatchPlan) -> PreparedBatchHandle | None:
        """:meth:`prepare_batch` of a plan of slices alone that repeats the rows of
        :attr:`steady` exactly (:mod:`sim.steady`), with the pages they need free; else
        None, and the general prepare decides. The same steps as the general one takes
        for such a plan (check_plan's match, the capacity of its new pages, the steady
        placement, the shape of a batch of one-token decodes), without the plan's
        intents looked at one by one (it has none)."""
        sd, slices = self.steady, plan.slices
        matched = sd.match(slices) if len(slices) == len(sd.rows) else None  # type: ignore[union-attr]
        if matched is None:
            return None
        contexts, new = matched
        if new is not sd.zeros and sum(new) > sd.pool.free_count:  # type: ignore[union-attr]
            return None  # refused by the general check, with its message
        st = BatchState(plan, None, self.generation)  # type: ignore[arg-type]
        st.decodes = contexts
        prepared = steady.place(sd, new, self.page_size)  # type: ignore[arg-type]
        st.finished = tuple([s.rid for s in slices if s.finishes])
        self.steady = steady.without_finished(sd, slices, st.finished)  # type: ignore[arg-type]
        self.host_lane.prepare(st, len(slices), (), admits=False)
        self._record_shape(st, 0)
        st.handle = build_handle(self.runtime_id, self.generation, plan.batch_id, prepared, ())
        self._prepared[plan.batch_id] = st
        return st.handle

    def apply_frees(self, plan: BatchPlan) -> validate.Checked:
        """A prepare's first half: check the whole plan (nothing changes unless it
        passes), then apply its frees and releases; return what the checks found.
        sim.fold calls it alone for a plan whose compute it folds."""
        checked = validate.check_plan(self, plan)  # nothing changes before both pass
        validate.check_capacity(self, plan, checked)
        released = checked.released
        if plan.frees:  # check_plan proved each page allocated and freed once
            if self._lowest:  # a pool's runs at once: the same pushes, in the same order
                for (tier, pool), runs in checked.frees.items():
                    self.tier(tier)[pool].free_runs(runs, checked=True)
            else:  # lifo: each extent's first page ends on top, extent by extent
                for ext in plan.frees:
                    self.tier(ext.tier)[ext.pool].free_runs(ext.runs(), checked=True)
        for rel in plan.releases:
            self._release(rel, released[rel.request.slot_id])
        return checked

    def execute_batch(self, handle: PreparedBatchHandle) -> None:
        st = self._prepared.get(handle.batch_id)
        if st is None or st.handle is not handle:  # the very one prepare returned is current
            check_generation(handle, self.runtime_id, self.generation, "prepared batch")
            # by value (a handle may cross a process)
            if st is None or st.handle != handle:
                raise ValueError(f"batch {handle.batch_id} was not prepared (or already "
                                 "executed)")
        del self._prepared[handle.batch_id]
        if self.host_lane.active:  # else it launches at once (st.launched stays None)
            ops_launched = self.model.num_layers + 1 if (st.prefills or st.decodes) else 1
            self.host_lane.execute(st, ops_launched, self.backup_calls(st))
        compute: simpy.Event
        if self._chain_compute:  # the same steps as compute_op, without a process
            compute = self.env.event()
            self.streams["compute"].submit_chain(ComputeChain(self, st, compute).start,
                                                 compute)
        else:
            compute = self.streams["compute"].submit(lambda: ops.compute_op(self, st))
        self._decode[st.plan.batch_id] = 0 if st.prefills else len(st.decodes)
        if st.prefills:
            self._prefilled.add(st.plan.batch_id)
        if st.backups and self.writeback.policy.chunked:
            ready: dict[str, float] = {}
            compute.callbacks.append(lambda _ev: ready.setdefault("t", self.env.now))
            self.streams["d2h"].submit(lambda: chunked_backup_op(self, st, ready),
                                       waits=(compute,))
        elif st.backups:
            self.streams["d2h"].submit(lambda: ops.backup_op(self, st), waits=(compute,))
        for store in st.plan.stores:
            detached.start(self.env, ops.store_op(self, store, self.generation))

    def poll(self) -> list[Completion]:
        out, self._completions = self._completions, []
        return out

    def wait(self, timeout: float | None = None) -> list[Completion]:
        """Run the simulation until a completion arrives or ``timeout`` simulated seconds
        pass (None: until nothing more is scheduled). For callers outside the SimPy loop;
        a SimPy process yields :meth:`completion_event` instead."""
        end = math.inf if timeout is None else self.env.now + max(0.0, timeout)
        while not self._completions and self.env.peek() <= end and self.env.peek() < math.inf:
            self.env.step()
        if not self._completions and self.env.now < end < math.inf:
            self.env.run(until=end)  # nothing came: the clock still reaches the timeout
        return self.poll()

    # ---- driver and ops helpers -------------------------------------------------------
    def completion_event(self) -> simpy.Event:
        """An event that fires when the next completion arrives (at once if one is queued).
        A driver may fire it early (an arrival wakes it, sim.driver); a fired one is
        replaced, so a later wait blocks again."""
        if self._completions:
            return self.env.event().succeed()
        wake = self._wake
        if wake is None or wake.triggered:
            wake = self._wake = self.env.event()
        return wake

    def complete(self, completion: Completion) -> None:
        if isinstance(completion, BatchCompletion):
            decode = self._decode.pop(completion.batch_id, 0)
            if self.host_lane.active:  # what it owes is read only by an active lane
                self.host_lane.completed(completion.batch_id in self._prefilled,
                                         len(completion.finished))
            self._prefilled.discard(completion.batch_id)
            self.writeback.step_done(completion.batch_id, completion.start, completion.end,
                                     decode)
        self._completions.append(completion)
        wake, self._wake = self._wake, None
        # an arrival may have fired it (sim.driver _Feed.wake); None: no one waits (an
        # event without callbacks changes nothing when processed, so none is scheduled)
        if wake is not None and not wake.triggered:
            wake.succeed()

    def pending_events(self, extent: CacheExtentRef) -> list[simpy.Event]:
        waits = self._pending.get(extent.pool)
        if not waits:
            return []
        return waits.events(extent.runs())

    def host_ready(self, extent: CacheExtentRef, done: simpy.Event) -> None:
        """``done`` fired: its L2 pages of ``extent`` wait for no backup any more (a page
        another backup took over keeps that one's event)."""
        waits = self._pending.get(extent.pool)
        if waits:
            waits.ready(extent.runs(), done)

    @property
    def bytes_moved(self) -> dict[str, int]:
        return dict(self.link.moved)

    def open_requests(self) -> int:
        return len(self.rows)

    # ---- internals ----------------------------------------------------------------
    def tier(self, tier: Tier) -> TierPools:
        if tier is _DEVICE:
            return self.device
        if tier is _HOST:
            return self.host
        raise ValueError(f"the runtime places no pages on tier {tier}")

    def _extent(self, tier: Tier, runs: list[Run], pool: Kind) -> CacheExtentRef:
        """The extent of the pages of ``runs`` (an allocation's: coalesced already, so
        its runs are ``coalesce`` of its pages)."""
        return build_extent(self.runtime_id, self.generation, tier,
                            tuple(starmap(page_run, runs)), pool)

    def _prepare_slice(self, s: RequestSlice, st: BatchState, loads: list[Load]
                       ) -> PreparedSlice:
        """A slice's pages, loads and shape (:meth:`_place_slices`: the short path that
        prepare_batch takes when it may)."""
        if s.request is None:
            handle = RequestRuntimeHandle(self.runtime_id, self._next_slot, self.generation)
            self._next_slot += 1
            row = self.rows[handle.slot_id] = RequestRow(handle, s.rid)
            for ext in s.attach:
                if ext.pool is _FULL:
                    row.append_extent(ext)
            landed: list[CacheExtentRef] = []
            if self.state_active:  # hybrid: the attach's L2 state pieces are loaded back
                attach, copies, landed = state_loads(
                    s.attach, lambda pool, n: self.device[pool].allocate(n), self.runtime_id,
                    self.generation)
                for pool, src, dst in copies:
                    loads.append((pool, len(src), runs_of(src), runs_of(dst)))
                    self.bytes_accounted["h2d"] += len(src) * self.bytes_per_page[pool]
                st.extra_s += self.state.open(handle.slot_id, attach, sum(
                    ld.src.num_pages for ld in s.loads if ld.src.pool is _FULL))
        else:
            row = self.rows[s.request.slot_id]
            landed = []
        loaded = []
        for ld in s.loads:  # the source's runs and the runs placed: no page listed
            src = ld.src
            pool, n = src.pool, src.num_pages
            runs = self.device[pool].allocate_runs(n)
            loads.append((pool, n, src.runs(), runs))
            ext = self._extent(_DEVICE, runs, pool)
            loaded.append(ext)
            if pool is _FULL:
                row.append_extent(ext)
            self.bytes_accounted["h2d"] += n * self.bytes_per_page[pool]
        runs = self.full.allocate_runs(validate.new_pages(self, s, row.size))
        row.append_runs(runs, own=True)
        state: tuple[CacheExtentRef, ...] = ()
        if self.state_active:
            state, seconds = self.state.advance(row.handle.slot_id, s, row.size,
                                                pages_of(runs))
            st.extra_s += seconds
        if s.phase is Phase.PREFILL:
            st.prefills.append((s.new_tokens, s.context_tokens))
        else:
            st.decodes.extend([s.context_tokens] * s.new_tokens)
        return PreparedSlice(s.rid, row.handle, row.extent(), (*loaded, *landed), state)

    def _place_slices(self, plan: BatchPlan, checked: validate.Checked, st: BatchState,
                      loads: list[Load]) -> tuple[PreparedSlice, ...]:
        """Each slice's pages and shape, in plan order. A request's later slice (most slices
        of a run: decode steps) takes the short path, with no state pools: the row and new
        page count the plan's check found, new pages if its tokens need them, and the same
        handle as last time when they do not (nothing of it changed); a first slice, or
        any with state pools, :meth:`_prepare_slice`. A plan that repeats the rows of the
        plan before (:mod:`sim.steady`) places only the pages its rows need; any other
        leaves its rows for the next plan to match, when it may."""
        slices = plan.slices
        if not slices:  # a cache-only plan: every row stays as it is
            return ()
        sd = checked.steady
        if sd is not None:  # check_plan matched its first slices to these rows
            st.decodes = checked.contexts  # type: ignore[assignment]  # 1-token decodes
            head = steady.place(sd, checked.new, self.page_size)
            if len(head) == len(slices):
                self.steady = steady.without_finished(sd, slices, st.finished)
                return head
            last, head_sd = None, sd
            prepared = head + self._place_each(slices[len(head):], checked.rows[len(head):],
                                               checked.new[len(head):], st, loads)
        else:
            last = self.steady if self.steady is not None and self.steady.current() else None
            head_sd = None
            prepared = self._place_each(slices, checked.rows, checked.new, st, loads)
        self.steady = (steady.after_prepare(last, head_sd, plan, checked, prepared,
                                            st.finished, self.full,
                                            self.page_size)
                       if not self.state_active else None)
        return prepared

    def _place_each(self, slices: tuple[RequestSlice, ...], rows: list[RequestRow | None],
                    news: list[int], st: BatchState, loads: list[Load]
                    ) -> tuple[PreparedSlice, ...]:
        """:meth:`_place_slices` slice by slice (``rows``, ``news``: the check's)."""
        short = not self.state_active
        allocate = self.full.allocate_runs
        prefills, decodes, decode = st.prefills, st.decodes, Phase.DECODE
        out = []
        for s, row, new in zip(slices, rows, news, strict=True):
            if not short or row is None:
                out.append(self._prepare_slice(s, st, loads))
                continue
            if new:
                row.append_runs(allocate(new), own=True)  # joins runs that continue
            if s.phase is not decode:
                prefills.append((s.new_tokens, s.context_tokens))
            elif s.new_tokens == 1:
                decodes.append(s.context_tokens)
            else:
                decodes.extend([s.context_tokens] * s.new_tokens)
            out.append(row.prepared_slice())
        return tuple(out)

    def _calls(self, pool: Kind, pages: int, src: list[Run], dst: list[Run], layers: range,
               host: list[Run]) -> int:
        """Copy calls of one op moving ``pages`` pages, runs ``src`` -> ``dst``, over
        ``layers`` (sim.host); ``host`` is whichever of the two lives in L2."""
        touched = (self.layers_touched[pool] if len(layers) == self.model.num_layers
                   else sum(1 for i in layers if self.layer_bytes[pool][i]))  # all: counted
        return self._calls_touching(pool, pages, src, dst, host, touched)

    def _calls_touching(self, pool: Kind, pages: int, src: list[Run], dst: list[Run],
                        host: list[Run], touched: int) -> int:
        return copy_calls(self.copies.io_backend, self.profile.io_kernel.mechanism,
                          self.mem_layout, pages, src, dst, host, touched,
                          touched == self.layers_touched[pool],
                          legacy="copy_calls" in self.profile.ablate)

    def _load_groups(self, loads: list[Load]
                     ) -> tuple[tuple[LoadGroup, ...], GroupSteps]:
        """One h2d op per layer (layer-wise) or one for all layers, as the torch runtime.
        A load's calls depend on the layers it touches only through their count: counted
        once per load and count, not once per layer (byte and call sums are integers: any
        order gives the same). Layer-wise groups depend only on each pool's pages and
        one-layer calls: batches alike share one tuple (groups are frozen), with what a
        chain's steps read of it (:func:`sim.batch.group_steps`, computed once)."""
        layers = self.model.num_layers
        if not self.layerwise:
            nbytes = calls = 0
            for pool, n, src, dst in loads:
                nbytes += self.bytes_per_page[pool] * n
                calls += self._calls(pool, n, src, dst, range(layers), src)  # src in L2
            one = (LoadGroup(range(layers), nbytes, calls),)
            return one, group_steps(one)
        # per pool, the pages and one-layer calls of its loads, summed: a layer's bytes are
        # its per-page bytes times the pages (integers: the same as load by load)
        pages: dict[Kind, int] = {}
        calls: dict[Kind, int] = {}
        for pool, n, src, dst in loads:
            pages[pool] = pages.get(pool, 0) + n
            calls[pool] = calls.get(pool, 0) + self._calls_touching(pool, n, src, dst, src, 1)
        key = tuple([(pool, n, calls[pool]) for pool, n in pages.items()])
        shared = self._groups.get(key)
        if shared is not None:
            return shared
        nbytes_at, calls_at = [0] * layers, [0] * layers
        for pool, n in pages.items():
            one = calls[pool]
            for i, b in enumerate(self.layer_bytes[pool]):
                if b:
                    nbytes_at[i] += b * n
                    calls_at[i] += one
        # one group per layer, its range shared by every batch (ranges are immutable)
        groups = tuple(map(LoadGroup, self._one_layer, nbytes_at, calls_at))
        if len(self._groups) >= 4096:  # a bound on a long run's distinct loads
            self._groups.clear()
        shared = self._groups[key] = (groups, group_steps(groups))
        return shared

    def backup_calls(self, st: BatchState) -> int:
        """Copy calls of the batch's one all-layer backup op."""
        # the torch runtime copies every backup of a pool in one op over their pages
        # concatenated, so runs continue across backups
        if not st.backups:
            return 0
        pools: dict[Kind, tuple[list[Run], list[Run]]] = {}
        for b in st.backups:
            src, dst = pools.setdefault(b.intent.src.pool, ([], []))
            src += b.src_runs
            dst += b.dst_runs
        return sum(self._calls(pool, sum(n for _, n in src), src, dst,
                               range(self.model.num_layers), dst)
                   for pool, (src, dst) in pools.items())

    def _start_loads(self, st: BatchState) -> None:
        if self._chain_loads:  # the same steps as load_op, without a process
            st.landed = Landed()
            done = self.env.event()
            self.streams["h2d"].submit_chain(LoadChain(self, st, done).start, done)
            return
        st.layer_events = [self.env.event() for _ in range(self.model.num_layers)]
        st.loads_done = st.layer_events[-1]  # the h2d stream completes layers in order
        self.streams["h2d"].submit(lambda: ops.load_op(self, st))

    def _record_shape(self, st: BatchState, load_bytes: int) -> None:
        """:attr:`batch_shapes` of ``st``: its requests, tokens, context tokens and
        ``load_bytes`` (integer sums: any order gives the same)."""
        pre, dec = st.prefills, st.decodes
        n = len(dec)
        if pre:
            tokens, context = n, sum(dec)
            for new, ctx in pre:
                tokens += new
                context += ctx
            self._shapes[st.plan.batch_id] = (len(pre) + n, tokens, context, load_bytes)
        else:
            self._shapes[st.plan.batch_id] = (n, n, sum(dec), load_bytes)

    def _release(self, rel: Release, freed: list[tuple[int, int]]) -> None:
        """Close the row; ``freed``: the runs of its own pages the tree did not keep."""
        row = self.rows.pop(rel.request.slot_id)
        if self.steady is not None and row in self.steady.rows:  # (identity: no __eq__)
            self.steady = None  # it lists a closed row
        self.full.free_runs(freed, checked=True)  # check_plan's runs
        if self.state_active:
            self.state.release(rel.request.slot_id, rel.kept())

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"SimRuntime({self.runtime_id!r}, gen={self.generation}, open={len(self.rows)})"
