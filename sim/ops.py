"""Process bodies the runtime puts on its streams and storage: load, compute, backup,
store, prefetch. Each records its timeline rows and completions.

Invariant: a body started under one generation never completes into a later generation
(a restart drops in-flight completions).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from hicache.runtime.handles import CacheExtentRef, Tier, coalesce
from hicache.runtime.interface import BatchCompletion, PrefetchIntent, StoreIntent
from hicache.runtime.interface import TransferCompletion as TC
from hicache.runtime.interface import TransferKind as TK
from sim.batch import BatchState
from sim.fluid import FluidJob

if TYPE_CHECKING:
    from sim.runtime import SimRuntime

Proc = Generator[simpy.Event, Any, None]


def load_op(rt: SimRuntime, st: BatchState) -> Proc:
    """H2D in the batch's load groups (one per layer when layer-wise, else one for all
    layers): each starts once the host issued its first call, then fires its layers'
    events."""
    bid = st.plan.batch_id
    slot = None
    for g, group in enumerate(st.load_groups):
        if group.nbytes:
            issued = st.load_issued[g]
            slot = yield from _start(rt, [issued] if issued is not None else [], slot)
            t0 = rt.env.now
            layer = group.layers.start if len(group.layers) == 1 else -1
            start, end = yield from rt.copies.copy(
                "h2d", group.nbytes, group.calls, op="load", batch=bid, layer=layer,
                issue_end=st.load_issue_end[g])
            rt.timeline.record("h2d", "load", t0, end, batch=bid, layer=layer,
                               nbytes=group.nbytes)
            rt.timeline.record("pcie:h2d", "load", start, end, batch=bid, layer=layer,
                               nbytes=group.nbytes)
        assert st.layer_events is not None
        for i in group.layers:
            st.layer_events[i].succeed()
    rt.host_lane.release(slot)


def _start(rt: SimRuntime, waits: list[simpy.Event], slot: simpy.Event | None
           ) -> Generator[simpy.Event, Any, simpy.Event | None]:
    """Wait until a device-lane op may start: its events, then the host (sim.host). A lane
    that holds the one-at-a-time slot (CPU runtime: the GIL) keeps it for its next op when
    that op is ready at once, as a running thread keeps the GIL; else it lets it go."""
    if slot is not None and all(e.processed for e in waits):
        if rt.host_lane.gap:
            yield rt.env.timeout(rt.host_lane.gap)
        return slot
    rt.host_lane.release(slot)
    for e in waits:
        if not e.processed:
            yield e
    yield from rt.host_lane.before_device_op()
    slot = rt.host_lane.acquire()
    if slot is not None:
        yield slot
    return slot


def _op(rt: SimRuntime, st: BatchState, waits: list[simpy.Event], seconds: float, op: str,
        layer: int, slot: simpy.Event | None
        ) -> Generator[simpy.Event, Any, tuple[float, simpy.Event | None]]:
    """One compute-lane op: once it may start (:func:`_start`), ``seconds`` of compute
    (slowed while copy kernels hold SMs), one timeline row. Returns (start, slot)."""
    env = rt.env
    slot = yield from _start(rt, waits, slot)
    t0 = env.now
    yield rt.fluid.submit(FluidJob(seconds, "compute"))
    rt.timeline.record("compute", op, t0, env.now, batch=st.plan.batch_id, layer=layer)
    return t0, slot


def compute_op(rt: SimRuntime, st: BatchState) -> Proc:
    """Per-layer compute waiting on launches and load events, or one fluid job (fast
    path: no host lane, no per-layer loads); then the LM head and sampling."""
    env, start = rt.env, rt.env.now
    bid = st.plan.batch_id
    if st.prefills or st.decodes:
        times = rt.cost.batch_layer_times(st.prefills, st.decodes)
        if st.extra_s:  # HBM copies of recurrent state, charged before the first layer
            times = (times[0] + st.extra_s, *times[1:])
        op = "prefill" if st.prefills else "decode"
        per_layer = (rt.trace_layers or (st.layer_events is not None and rt.layerwise)
                     or st.launched is not None)
        if st.loads_done is not None and not rt.layerwise:
            yield st.loads_done  # layerwise=False: every load lands before layer 0
        slot = None
        if not per_layer:
            t0 = env.now
            yield rt.fluid.submit(FluidJob(sum(times), "compute"))
            rt.timeline.record("compute", op, t0, env.now, batch=bid)
            start = t0
        else:
            for layer, t in enumerate(times):
                waits = [] if st.launched is None else [st.launched[layer]]
                if st.layer_events is not None and rt.layerwise:
                    waits.append(st.layer_events[layer])
                t0, slot = yield from _op(rt, st, waits, t, op, layer, slot)
                start = t0 if layer == 0 else start
        sample = rt.cost.sample_time(len(st.prefills) + len(st.decodes))
        if sample > 0 or st.launched is not None:
            waits = [] if st.launched is None else [st.launched[len(times)]]
            _, slot = yield from _op(rt, st, waits, sample, "sample", -1, slot)
        rt.host_lane.release(slot)
    elif st.loads_done is not None:
        yield st.loads_done  # a plan without slices still completes after its loads
    if st.generation == rt.generation:
        rt.complete(BatchCompletion(bid, start, env.now, st.finished))


def backup_op(rt: SimRuntime, st: BatchState) -> Proc:
    """One all-layer D2H copy for all of the batch's backups (after its compute)."""
    payload = sum(b.dst.num_pages * rt.bytes_per_page[b.intent.src.pool] for b in st.backups)
    calls = rt.backup_calls(st)
    slot = yield from _start(rt, [], None)
    t0 = rt.env.now
    if payload:
        bid = st.plan.batch_id
        start, end = yield from rt.copies.copy("d2h", payload, calls, rt.backup_throttle,
                                               op="backup", batch=bid)
    rt.host_lane.release(slot)
    if payload:
        rt.timeline.record("d2h", "backup", t0, end, batch=bid, nbytes=payload)
        rt.timeline.record("pcie:d2h", "backup", start, end, batch=bid, nbytes=payload)
    backups_done(rt, st)


def backups_done(rt: SimRuntime, st: BatchState) -> None:
    """The batch's L2 copies exist: release stores waiting on them, post completions."""
    for b in st.backups:
        b.done.succeed()
        if st.generation == rt.generation:
            rt.host_ready(b.dst, b.done)
            rt.complete(TC(b.intent.job_id, TK.BACKUP, rt.env.now, b.dst.num_pages, b.dst))


def store_op(rt: SimRuntime, store: StoreIntent, generation: int) -> Proc:
    """L2 -> L3 once the host pages exist; keys already in L3 are not written again."""
    pending = rt.pending_events(store.src)
    if pending:
        yield rt.env.all_of(pending)
    assert rt.l3 is not None
    bpp = rt.bytes_per_page[store.src.pool]
    t0 = rt.env.now
    written = yield from rt.l3.write(store.keys, bpp, rt.profile.host_memory_bytes_per_s)
    if written:
        rt.timeline.record("l3", "store", t0, rt.env.now, nbytes=written * bpp)
    if generation == rt.generation:
        rt.l3_bytes["write"] += written * bpp
        rt.complete(TC(store.job_id, TK.STORE, rt.env.now, written))


def prefetch_op(rt: SimRuntime, pf: PrefetchIntent, reserved: list[int], generation: int
                ) -> Proc:
    """Query L3 in batches (stop at the first miss); revoke below min_hit_pages, else fetch
    the hit prefix (at most max_pages) into the reserved host pages, batch by batch."""
    assert rt.l3 is not None
    trips = yield from rt.l3.query(pf.keys, pf.batch_pages)
    for start, end, _ in trips:
        rt.timeline.record("l3", "query", start, end)
    hit = sum(h for _, _, h in trips)
    fetch = min(hit, pf.max_pages) if hit >= max(pf.min_hit_pages, 1) else 0
    bpp = rt.bytes_per_page["full"]
    for lo in range(0, fetch, pf.batch_pages):
        hi = min(fetch, lo + pf.batch_pages)
        t0 = rt.env.now
        yield from rt.l3.read(pf.keys[lo:hi], (hi - lo) * bpp, rt.profile.host_memory_bytes_per_s)
        rt.timeline.record("l3", "prefetch", t0, rt.env.now, nbytes=(hi - lo) * bpp)
    if generation != rt.generation:
        return
    rt.l3_bytes["read"] += fetch * bpp
    if reserved[fetch:]:
        rt.host["full"].free(reserved[fetch:])
    extent = None
    if fetch:
        extent = CacheExtentRef(rt.runtime_id, generation, Tier.HOST, coalesce(reserved[:fetch]),
                                "full")
    rt.complete(TC(pf.job_id, TK.PREFETCH, rt.env.now, fetch, extent, hit))
