"""Process bodies the runtime puts on its streams and storage: load, compute, backup,
store, prefetch. Each records its timeline rows and completions.

Invariant: a body started under one generation never completes into a later generation
(a restart drops in-flight completions).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from hicache.runtime.handles import Kind, Tier
from hicache.runtime.interface import PrefetchIntent, StoreIntent
from hicache.runtime.interface import TransferCompletion as TC
from hicache.runtime.interface import TransferKind as TK
from hicache.runtime.page_ids import Run, merged
from sim.batch import BatchState, build_completion
from sim.fluid import FluidJob

if TYPE_CHECKING:
    from sim.runtime import SimRuntime

_FULL, _HOST = Kind.FULL, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)
Proc = Generator[simpy.Event, Any, None]


def load_op(rt: SimRuntime, st: BatchState) -> Proc:
    """H2D in the batch's load groups (one per layer when layer-wise, else one for all
    layers): each starts once the host issued its first call, then fires its layers'
    events."""
    bid = st.plan.batch_id
    for g, group in enumerate(st.load_groups):
        if group.nbytes:
            issued = st.load_issued[g]
            yield from _start(rt, [issued] if issued is not None else [])
            t0 = rt.env._now
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


def _start(rt: SimRuntime, waits: list[simpy.Event], woken: bool = False) -> Proc:
    """Wait until a device-lane op may start: its events, then its lane's worker (a wake-up
    if it had to wait for them, or ``woken``: the op's lane waited for another lane;
    else the hand-off gap: :meth:`sim.host.HostLane.before_device_op`)."""
    asleep = woken
    for e in waits:
        if not e.processed:
            asleep = True
            yield e
    yield from rt.host_lane.before_device_op(asleep)


def _op(rt: SimRuntime, st: BatchState, waits: list[simpy.Event], seconds: float, op: str,
        layer: int, interp: float = 0.0) -> Generator[simpy.Event, Any, float]:
    """One compute-lane op: once it may start (:func:`_start`), ``seconds`` of compute
    (slowed while copy kernels hold SMs, and, ``interp`` of it, while other threads hold
    the CPU runtime's interpreter lock: :mod:`sim.interpreter`), one timeline row.
    Returns its start."""
    env = rt.env
    yield from _start(rt, waits)
    t0 = env._now
    gil = interp / seconds if rt.interpreter and seconds > 0 else 0.0
    yield rt.fluid.submit(FluidJob(seconds, "compute", gil=gil, thread="compute"))
    rt.timeline.record("compute", op, t0, env._now, batch=st.plan.batch_id, layer=layer)
    return t0


def compute_op(rt: SimRuntime, st: BatchState) -> Proc:
    """Per-layer compute waiting on launches and load events, or one fluid job (fast
    path: no host lane, no per-layer loads); then the LM head and sampling."""
    env, start = rt.env, rt.env._now
    bid = st.plan.batch_id
    if st.prefills or st.decodes:
        times = rt.cost.batch_layer_times(st.prefills, st.decodes)
        interp = rt.cost.batch_layer_interpreter(st.prefills, st.decodes)
        if st.extra_s:  # HBM copies of recurrent state, charged before the first layer
            times = (times[0] + st.extra_s, *times[1:])
        op = "prefill" if st.prefills else "decode"
        per_layer = (rt.trace_layers or (st.layer_events is not None and rt.layerwise)
                     or st.launched is not None)
        if st.loads_done is not None and not rt.layerwise:
            yield st.loads_done  # layerwise=False: every load lands before layer 0
        if not per_layer:
            t0 = env._now
            yield rt.fluid.submit(FluidJob(sum(times), "compute"))
            rt.timeline.record("compute", op, t0, env._now, batch=bid)
            start = t0
        else:
            for layer, t in enumerate(times):
                waits = [] if st.launched is None else [st.launched[layer]]
                if st.layer_events is not None and rt.layerwise:
                    waits.append(st.layer_events[layer])
                t0 = yield from _op(rt, st, waits, t, op, layer, interp[layer])
                start = t0 if layer == 0 else start
        requests = len(st.prefills) + len(st.decodes)
        sample = rt.cost.sample_time(requests)
        if sample > 0 or st.launched is not None:
            waits = [] if st.launched is None else [st.launched[len(times)]]
            yield from _op(rt, st, waits, sample, "sample", -1,
                           rt.cost.sample_interpreter(requests))
    elif st.loads_done is not None:
        yield st.loads_done  # a plan without slices still completes after its loads
    if st.generation == rt.generation:
        rt.complete(build_completion(bid, start, env._now, st.finished))


def backup_op(rt: SimRuntime, st: BatchState) -> Proc:
    """One all-layer D2H copy for all of the batch's backups (after its compute)."""
    payload = sum(b.dst.num_pages * rt.bytes_per_page[b.intent.src.pool] for b in st.backups)
    calls = rt.backup_calls(st)
    yield from _start(rt, [], woken=True)  # the d2h worker waited for the compute lane
    t0 = rt.env._now
    if payload:
        bid = st.plan.batch_id
        start, end = yield from rt.copies.copy("d2h", payload, calls, rt.backup_throttle,
                                               op="backup", batch=bid)
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
            rt.complete(TC(b.intent.job_id, TK.BACKUP, rt.env._now, b.dst.num_pages, b.dst))


def store_op(rt: SimRuntime, store: StoreIntent, generation: int) -> Proc:
    """L2 -> L3 once the host pages exist; keys already in L3 are not written again. A
    failed write writes nothing (the pages stay L2-only)."""
    pending = rt.pending_events(store.src)
    if pending:
        yield rt.env.all_of(pending)
    client = rt.l3_client
    assert client is not None
    bpp = rt.bytes_per_page[store.src.pool]
    t0 = rt.env._now
    written = yield from client.put(store.keys, bpp)
    if written:
        rt.timeline.record("l3", "store", t0, rt.env._now, nbytes=written * bpp)
    if generation == rt.generation:
        rt.l3_bytes["write"] += written * bpp
        rt.complete(TC(store.job_id, TK.STORE, rt.env._now, written))


def prefetch_op(rt: SimRuntime, pf: PrefetchIntent, reserved: list[Run], generation: int
                ) -> Proc:
    """Query L3 in batches (stop at the first miss); revoke below min_hit_pages, else fetch
    the hit prefix (at most max_pages) into the reserved host pages (``reserved``: their
    allocation's runs), batch by batch. A failed call answers misses (sim.l3_client):
    what it did not fetch is recomputed."""
    client = rt.l3_client
    assert client is not None
    ledger = client.ledger
    truth = client.store.truth_hits(pf.keys) if ledger is not None else None
    # faults behind failed attempts (sim.faults' ledger; no ledger: nobody reads them)
    trace: list[int | None] | None = [] if ledger is not None else None
    on_path = client.on_path() if ledger is not None else ()  # e.g. a slow NIC
    held = client.store.version  # every hit a query finds is held since (L3Client.get)
    hit = 0
    for lo in range(0, len(pf.keys), pf.batch_pages):
        chunk = pf.keys[lo:lo + pf.batch_pages]
        t0 = rt.env._now
        n = yield from client.leading_hits(chunk, trace)  # up to the first miss
        rt.timeline.record("l3", "query", t0, rt.env._now)
        hit += n
        if n < len(chunk):
            break
    fetch = min(hit, pf.max_pages) if hit >= max(pf.min_hit_pages, 1) else 0
    bpp = rt.bytes_per_page[_FULL]
    got = 0
    for lo in range(0, fetch, pf.batch_pages):
        hi = min(fetch, lo + pf.batch_pages)
        t0 = rt.env._now
        n = yield from client.get(pf.keys[lo:hi], bpp, trace, held)
        if n:
            rt.timeline.record("l3", "prefetch", t0, rt.env._now, nbytes=n * bpp)
        got += n
        if n < hi - lo:
            break
    if ledger is not None and truth is not None and trace is not None:
        ledger.prefetched(rt, pf, truth, [*trace, *on_path, *client.on_path()], got)
    if generation != rt.generation:
        return
    rt.l3_bytes["read"] += got * bpp
    fetched, rest = split_runs(reserved, got)
    if rest:  # the pages of runs_of(pages[got:]), freed as free(pages[got:]) frees them
        # (this op's own reservation, allocated for it in this generation and handed to no
        # one: each page allocated and listed once, nothing to check)
        rt.host[_FULL].free_runs(merged(rest), checked=True)
    extent = rt.memory.extent(_HOST, fetched, _FULL) if got else None
    rt.complete(TC(pf.job_id, TK.PREFETCH, rt.env._now, got, extent, hit))


def split_runs(runs: list[Run], k: int) -> tuple[list[Run], list[Run]]:
    """``runs`` cut after their first ``k`` pages: the runs of those pages and of the rest
    (a run the cut falls in is split in two), each in order."""
    for i, (s, n) in enumerate(runs):
        if k < n:
            if k == 0:
                return runs[:i], runs[i:]
            return [*runs[:i], (s, k)], [(s + k, n - k), *runs[i + 1:]]
        k -= n
    return runs, []
