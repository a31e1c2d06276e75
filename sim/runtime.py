"""SimRuntime: the RuntimeInterface over a SimPy model of one GPU, its host and L3.

Invariants: all time is ``env.now``; prepare_batch places pages (per-pool free lists) and
starts layer-wise H2D loads at once (as soon as the host issued them, :mod:`sim.host`), so
loads of batch N+1 overlap compute of batch N; execute_batch queues compute after earlier
batches (each op once the host launched it), the LM head and sampling, then one D2H backup
copy per batch; every handle is checked against (runtime_id, generation); bytes copied per
direction are counted by the link (``bytes_moved``) and, independently, from page counts at
prepare (``bytes_accounted``). ``batch_shapes`` records what each batch computed (tokens,
requests, context, load bytes) for residual plots. The runtime composes components with
one concern each (:class:`SimRuntime`); ``generation`` equals its memory's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import simpy
from simpy.events import PENDING

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    Tier,
    check_generation,
    pools_of,
)
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    Completion,
    PreparedBatchHandle,
    RuntimeInfo,
)
from hicache.runtime.writeback import WritebackConfig
from hicache.tiers.l3_guard import RetryPolicy
from hicache.timeline import Timeline
from sim import compute_chain, detached, ops, validate
from sim.accounting import Accounting
from sim.batch import BatchState, build_handle
from sim.calibration import apply_copy_calibration
from sim.compute_chain import ComputeChain
from sim.cost import CostModel
from sim.hardware.model import ModelPreset, load_model
from sim.hardware.profile import HardwareProfile, load_profile
from sim.l3 import L3Store
from sim.load_chain import Landed, LoadChain, chain_possible
from sim.memory import Memory
from sim.pools import TierPools
from sim.runtime_config import RuntimeConfig
from sim.streams import fire, pending
from sim.transfers import Load, Transfers
from sim.writeback import Writeback, chunked_backup_op

_FULL = Kind.FULL  # hot: Enum reads (ARCHITECTURE.md)

# the names SimRuntime exposes for its components' parts (its doc): set once, never
# rebound; the ops, chains and folds read them per event
VIEWS = {
    "link": ("transfers", "link"), "fluid": ("transfers", "fluid"),
    "copies": ("transfers", "copies"), "streams": ("transfers", "streams"),
    "host_lane": ("transfers", "host_lane"), "l3_client": ("transfers", "l3_client"),
    "interpreter": ("transfers", "interpreter"),
    "batch_shapes": ("accounting", "batch_shapes"),
    "bytes_accounted": ("accounting", "bytes_accounted"),
    "l3_bytes": ("accounting", "l3_bytes"), "fold_counts": ("accounting", "fold_counts"),
    "layerwise": ("config", "layerwise"), "trace_layers": ("config", "trace_layers"),
    "fold_layers": ("config", "fold_layers"), "bytes_per_page": ("config", "bytes_per_page"),
}
# the same for the current memory's parts: set by every restart (a new Memory)
MEMORY_VIEWS = ("rows", "device", "host")


class SimRuntime:
    """The RuntimeInterface over the components: :class:`~sim.runtime_config.RuntimeConfig`
    (fixed sizes and flags), :class:`~sim.memory.Memory` (one generation's pools, rows and
    placement), :class:`~sim.transfers.Transfers` (link, fluid server, copy engines,
    streams, host lane, L3 client, load grouping) and :class:`~sim.accounting.Accounting`
    (shapes, bytes, fold counts). What it keeps itself is the batches' life: prepared
    batches, completions, the wake-up a driver waits on, the generation.

    Besides its components it exposes, under the names the ops, chains and folds read
    (:data:`VIEWS`), references to their parts: set once here, never rebound (a restart
    replaces only the memory, and sets the views of its parts, :data:`MEMORY_VIEWS`), so a
    hot read costs one slot read; the cold rest are properties."""

    # slotted: every event reads it (ARCHITECTURE.md, RequestState)
    __slots__ = (
        # components
        'config', 'memory', 'transfers', 'accounting',
        # the batches' life (this adapter's own state)
        '_chain_compute', '_chain_loads', '_completions', '_decode', '_prefilled',
        '_prepared', '_wake', 'env', 'generation', 'cost', 'l3', 'model', 'profile',
        'timeline', 'writeback',
        # views (VIEWS)
        'batch_shapes', 'bytes_accounted', 'copies', 'fluid', 'fold_counts', 'fold_layers',
        'host_lane', 'interpreter', 'l3_bytes', 'l3_client', 'layerwise', 'link',
        'streams', 'trace_layers', 'bytes_per_page',
        # memory views (MEMORY_VIEWS)
        'rows', 'device', 'host',
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
        device_pages, host_pages = pools_of(device_pages), pools_of(host_pages)
        if _FULL not in device_pages:
            raise ValueError("device_pages needs a 'full' pool (request KV lives there)")
        self.env = env
        if not isinstance(profile, HardwareProfile):
            profile = load_profile(profile)
        self.profile = apply_copy_calibration(profile)  # measured copy tables, if any
        self.model = model if isinstance(model, ModelPreset) else load_model(model)
        self.config = cfg = RuntimeConfig.build(
            self.profile, self.model, runtime_id=runtime_id, page_size=page_size,
            device_pages=device_pages, host_pages=host_pages, layerwise=layerwise,
            trace_layers=trace_layers, fold_layers=fold_layers, mem_layout=mem_layout,
            backup_throttle=backup_throttle_bytes_per_s)
        self.l3 = l3
        self.writeback = Writeback(writeback)  # when D2H backups run (runtime-owned policy)
        self._decode: dict[int, int] = {}  # executed batch id -> decode batch size (or 0)
        self._prefilled: set[int] = set()  # executed, uncompleted batches that prefill
        self.timeline = timeline if timeline is not None else Timeline()
        self.cost = CostModel(self.profile, self.model)
        self.transfers = tr = Transfers(env, self.profile, self.cost, self.timeline, cfg,
                                        io_backend)
        self.accounting = acc = Accounting()
        if l3 is not None:
            tr.attach_l3(env, l3, self.timeline, l3_retry)
        # views (VIEWS): the components' parts the ops, chains and folds read per event
        self.link, self.fluid, self.copies = tr.link, tr.fluid, tr.copies
        self.streams, self.host_lane, self.l3_client = tr.streams, tr.host_lane, tr.l3_client
        self.interpreter = tr.interpreter
        self.batch_shapes, self.bytes_accounted = acc.batch_shapes, acc.bytes_accounted
        self.l3_bytes, self.fold_counts = acc.l3_bytes, acc.fold_counts
        self.layerwise, self.trace_layers = cfg.layerwise, cfg.trace_layers
        self.fold_layers, self.bytes_per_page = cfg.fold_layers, cfg.bytes_per_page
        self._chain_loads = chain_possible(self)
        self._chain_compute = compute_chain.chain_possible(self)
        self.generation = 0
        self._wake: simpy.Event | None = None
        self.restart()

    def restart(self) -> None:
        """New generation: empty pools and rows; every earlier handle becomes stale."""
        self.generation += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()  # a driver waiting on the old generation wakes and re-reads
        self.memory = mem = Memory(self.config, self.generation)
        self.rows, self.device, self.host = mem.rows, mem.device, mem.host  # MEMORY_VIEWS
        self._prepared: dict[int, BatchState] = {}
        self._completions: list[Completion] = []
        # what completion_event handed out (None: nothing yet since the last completion,
        # so nothing waits: a completion then schedules no wake-up that no one reads)
        self._wake = None

    # ---- the components' parts, read where they are cold (tests, reports, drivers) ------
    runtime_id = property(lambda self: self.config.runtime_id)
    page_size = property(lambda self: self.config.page_size)
    device_sizes = property(lambda self: self.config.device_sizes)
    host_sizes = property(lambda self: self.config.host_sizes)
    layer_bytes = property(lambda self: self.config.layer_bytes)
    layers_touched = property(lambda self: self.config.layers_touched)
    mem_layout = property(lambda self: self.config.mem_layout)
    backup_throttle = property(lambda self: self.config.backup_throttle)
    swa_window = property(lambda self: self.config.swa_window)
    mamba = property(lambda self: self.config.mamba)
    state_copy_s = property(lambda self: self.config.state_copy_s)
    state = property(lambda self: self.memory.state)
    full = property(lambda self: self.memory.full)
    state_active = property(lambda self: self.memory.state_active)
    steady = property(lambda self: self.memory.steady)
    _pending = property(lambda self: self.memory.pending)

    # ---- RuntimeInterface -------------------------------------------------------------
    def info(self) -> RuntimeInfo:
        cfg = self.config
        return RuntimeInfo(cfg.runtime_id, self.generation, cfg.page_size,
                           dict(cfg.device_sizes), dict(cfg.host_sizes),
                           dict(cfg.bytes_per_page), cfg.num_layers,
                           swa_window=cfg.swa_window, mamba=cfg.mamba)

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        if plan.batch_id in self._prepared:
            raise ValueError(f"batch {plan.batch_id} is already prepared")
        mem = self.memory
        if mem.steady is not None and not (plan.frees or plan.releases or plan.backups
                                           or plan.stores or plan.prefetches):
            handle = self._prepare_steady(plan)
            if handle is not None:
                return handle
        checked = mem.apply_frees(plan, self.l3 is not None)
        st = BatchState(plan, None, self.generation)  # type: ignore[arg-type]
        st.finished = tuple([s.rid for s in plan.slices if s.finishes])
        loads: list[Load] = []
        slices = mem.place(plan, checked, st, loads)
        accounted, bpp = self.bytes_accounted, self.config.bytes_per_page
        load_bytes = 0  # the loads' bytes: what their groups hold (integers: any order)
        if loads:
            for pool, n, _, _ in loads:
                load_bytes += n * bpp[pool]
            accounted["h2d"] += load_bytes
            st.load_groups, st.load_steps = self.transfers.load_groups(loads)
        lane = self.host_lane
        if loads or lane.active:  # (else it has nothing to queue: HostLane.prepare)
            lane.prepare(st, len(plan.slices),
                         [g.calls if g.nbytes else 0 for g in st.load_groups]
                         if loads else (), admits=bool(st.prefills))
        if loads:
            self._start_loads(st)
        if plan.backups:
            st.backups = [mem.backup(b, pending(self.env)) for b in plan.backups]
            for b in plan.backups:
                accounted["d2h"] += b.src.num_pages * bpp[b.src.pool]
        self.accounting.record_shape(st, load_bytes)
        for pf in plan.prefetches:
            reserved = mem.host[_FULL].allocate_runs(pf.max_pages)
            detached.start(self.env, ops.prefetch_op(self, pf, reserved, self.generation))
        st.handle = build_handle(mem.runtime_id, self.generation, plan.batch_id, slices,
                                 tuple([b.dst for b in st.backups]) if st.backups
                                 else ())
        self._prepared[plan.batch_id] = st
        return st.handle

    def _prepare_steady(self, plan: BatchPlan) -> PreparedBatchHandle | None:
        """:meth:`prepare_batch` of a plan of slices alone that repeats the rows of the
        steady decode batch exactly (:meth:`Memory.place_steady`); else None, and the
        general prepare decides (the shape of a batch of one-token decodes)."""
        placed = self.memory.place_steady(plan)
        if placed is None:
            return None
        st = BatchState(plan, None, self.generation)  # type: ignore[arg-type]
        st.decodes, prepared, st.finished = placed
        if self.host_lane.active:  # (else a batch loading nothing queues nothing)
            self.host_lane.prepare(st, len(plan.slices), (), admits=False)
        self.accounting.record_shape(st, 0)
        st.handle = build_handle(self.config.runtime_id, self.generation, plan.batch_id,
                                 prepared, ())
        self._prepared[plan.batch_id] = st
        return st.handle

    def apply_frees(self, plan: BatchPlan) -> validate.Checked:
        """A prepare's first half (:meth:`Memory.apply_frees`): check the whole plan, then
        apply its frees and releases. sim.fold calls it alone for a plan whose compute it
        folds."""
        return self.memory.apply_frees(plan, self.l3 is not None)

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
            ops_launched = self.config.num_layers + 1 if (st.prefills or st.decodes) else 1
            self.host_lane.execute(st, ops_launched, self.backup_calls(st))
        compute: simpy.Event
        if self._chain_compute:  # the same steps as compute_op, without a process
            compute = pending(self.env)
            self.streams["compute"].submit_chain(ComputeChain(self, st, compute).start,
                                                 compute)
        else:
            compute = self.streams["compute"].submit(lambda: ops.compute_op(self, st))
        self._decode[st.plan.batch_id] = 0 if st.prefills else len(st.decodes)
        if st.prefills:
            self._prefilled.add(st.plan.batch_id)
        if st.backups and self.writeback.policy.chunked:
            ready: dict[str, float] = {}
            compute.callbacks.append(lambda _ev: ready.setdefault("t", self.env._now))
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
        if wake is None or wake._value is not PENDING:  # (``triggered``)
            wake = self._wake = pending(self.env)
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
        # event without callbacks changes nothing when processed, so none is scheduled);
        # not triggered: its value pending (what ``triggered`` reads)
        if wake is not None and wake._value is PENDING:
            fire(self.env, wake)

    def pending_events(self, extent: CacheExtentRef) -> list[simpy.Event]:
        return self.memory.pending_events(extent)

    def host_ready(self, extent: CacheExtentRef, done: simpy.Event) -> None:
        """``done`` fired: its L2 pages of ``extent`` wait for no backup any more."""
        self.memory.host_ready(extent, done)

    @property
    def bytes_moved(self) -> dict[str, int]:
        return dict(self.link.moved)

    def open_requests(self) -> int:
        return len(self.memory.rows)

    # ---- ops helpers ------------------------------------------------------------------
    def tier(self, tier: Tier) -> TierPools:
        return self.memory.tier(tier)

    def backup_calls(self, st: BatchState) -> int:
        """Copy calls of the batch's one all-layer backup op (:mod:`sim.transfers`)."""
        return self.transfers.backup_calls(st)

    def _start_loads(self, st: BatchState) -> None:
        if self._chain_loads:  # the same steps as load_op, without a process
            st.landed = Landed()
            done = pending(self.env)
            self.streams["h2d"].submit_chain(LoadChain(self, st, done).start, done)
            return
        st.layer_events = [self.env.event() for _ in range(self.config.num_layers)]
        st.loads_done = st.layer_events[-1]  # the h2d stream completes layers in order
        self.streams["h2d"].submit(lambda: ops.load_op(self, st))

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"SimRuntime({self.config.runtime_id!r}, gen={self.generation}, "
                f"open={len(self.memory.rows)})")
