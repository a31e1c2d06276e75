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


def load_op(rt: SimRuntime, batch: int, layer_bytes: list[int], layer_calls: list[int],
            events: list[simpy.Event]) -> Proc:
    """Layer-wise H2D: one copy (or copy kernel) per layer, then that layer's event."""
    for layer, (nbytes, calls) in enumerate(zip(layer_bytes, layer_calls, strict=True)):
        if nbytes:
            t0 = rt.env.now
            start, end = yield from rt.copies.copy("h2d", nbytes, calls, op="load",
                                                   batch=batch, layer=layer)
            rt.timeline.record("h2d", "load", t0, end, batch=batch, layer=layer, nbytes=nbytes)
            rt.timeline.record("pcie:h2d", "load", start, end, batch=batch, layer=layer,
                               nbytes=nbytes)
        events[layer].succeed()


def compute_op(rt: SimRuntime, st: BatchState) -> Proc:
    """Per-layer compute waiting on load events, or one fluid job (fast path)."""
    env, start = rt.env, rt.env.now
    bid = st.plan.batch_id
    if st.prefills or st.decodes:
        times = rt.cost.batch_layer_times(st.prefills, st.decodes)
        if st.extra_s:  # HBM copies of recurrent state, charged before the first layer
            times = (times[0] + st.extra_s, *times[1:])
        op = "prefill" if st.prefills else "decode"
        per_layer = rt.trace_layers or (st.layer_events is not None and rt.layerwise)
        if st.loads_done is not None and not rt.layerwise:
            yield st.loads_done  # layerwise=False: every load lands before layer 0
        if not per_layer:
            t0 = env.now
            yield rt.fluid.submit(FluidJob(sum(times), "compute"))
            rt.timeline.record("compute", op, t0, env.now, batch=bid)
        else:
            for layer, t in enumerate(times):
                if st.layer_events is not None and rt.layerwise:
                    yield st.layer_events[layer]
                t0 = env.now
                yield rt.fluid.submit(FluidJob(t, "compute"))
                rt.timeline.record("compute", op, t0, env.now, batch=bid, layer=layer)
    elif st.loads_done is not None:
        yield st.loads_done  # a plan without slices still completes after its loads
    if st.generation == rt.generation:
        rt.complete(BatchCompletion(bid, start, env.now, st.finished))


def backup_op(rt: SimRuntime, st: BatchState) -> Proc:
    """One all-layer D2H copy for all of the batch's backups (after its compute)."""
    payload = calls = 0
    for b in st.backups:
        pool = b.intent.src.pool
        payload += b.dst.num_pages * rt.bytes_per_page[pool]
        calls += b.calls_per_layer * rt.layers_touched[pool]
    if rt.copies.io_backend == "kernel":
        calls = 1
    t0 = rt.env.now
    if payload:
        bid = st.plan.batch_id
        start, end = yield from rt.copies.copy("d2h", payload, calls, rt.backup_throttle,
                                               op="backup", batch=bid)
        rt.timeline.record("d2h", "backup", t0, end, batch=bid, nbytes=payload)
        rt.timeline.record("pcie:d2h", "backup", start, end, batch=bid, nbytes=payload)
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
