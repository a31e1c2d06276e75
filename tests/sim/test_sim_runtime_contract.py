"""SimRuntime honours the RuntimeInterface contract: placement, handles and generations,
capacity, conservation of pages and bytes, determinism, L3 transfers and completions."""

from __future__ import annotations

import pytest
import simpy
from simtoys import host_copy_of_prefill, make_runtime, toy_model, toy_profile

from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, StaleHandleError, Tier
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    LoadIntent,
    Phase,
    PrefetchIntent,
    Release,
    RequestSlice,
    RuntimeInterface,
    StoreIntent,
    TransferCompletion,
    TransferKind,
)
from sim.l3 import L3Store
from sim.pools import CapacityError

PAGE = 16


def run(env, rt, plan):
    handle = rt.prepare_batch(plan)
    rt.execute_batch(handle)
    env.run()
    return handle, rt.poll()


def test_sim_runtime_implements_the_interface(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    assert isinstance(rt, RuntimeInterface)
    info = rt.info()
    assert (info.page_size, info.num_layers, info.device_pages) == (16, 4, {Kind.FULL: 1024})
    assert info.bytes_per_page == {Kind.FULL: 4 * 16 * 1024}


def test_request_kv_grows_by_pages_in_token_order(env, profile, model) -> None:
    """kv = attached extents + loaded pages + own pages; a partial last page is reused."""
    rt = make_runtime(env, profile, model)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=2 * PAGE, batch_id=0)
    cached = rt.prepare_batch(BatchPlan(5, slices=(RequestSlice(9, Phase.PREFILL, 0, 3 * PAGE),)))
    attach = cached.slices[0].kv
    first, _ = run(env, rt, BatchPlan(6, slices=(RequestSlice(
        3, Phase.PREFILL, 5 * PAGE, 10, attach=(attach,), loads=(LoadIntent(host),)),)))
    s = first.slices[0]
    own = list(s.kv.pages())[5:]
    assert list(s.kv.pages()) == list(attach.pages()) + list(s.loaded[0].pages()) + own
    assert len(own) == 1  # 10 new tokens: one partly filled page
    nxt, _ = run(env, rt, BatchPlan(7, slices=(RequestSlice(
        3, Phase.DECODE, 5 * PAGE + 10, 1, request=s.request),)))
    assert nxt.slices[0].kv.num_pages == 6  # token 11 of the last page: no new page
    nxt, _ = run(env, rt, BatchPlan(8, slices=(RequestSlice(
        3, Phase.PREFILL, 5 * PAGE + 11, 6, request=s.request),)))
    assert nxt.slices[0].kv.num_pages == 7


def test_stale_handles_and_foreign_extents_are_rejected(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    h, _ = run(env, rt, BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 32),)))
    foreign = CacheExtentRef("other", rt.generation, Tier.DEVICE, (PageRun(0, 1),))
    with pytest.raises(StaleHandleError, match="other"):
        rt.prepare_batch(BatchPlan(2, frees=(foreign,)))
    rt.restart()
    with pytest.raises(StaleHandleError, match="stale"):
        rt.prepare_batch(BatchPlan(3, slices=(RequestSlice(
            1, Phase.DECODE, 32, 1, request=h.slices[0].request),)))
    with pytest.raises(StaleHandleError):
        rt.prepare_batch(BatchPlan(4, backups=(BackupIntent(h.slices[0].kv, 1),)))
    with pytest.raises(StaleHandleError):
        rt.execute_batch(h)


def test_a_later_slice_must_carry_its_own_requests_handle(env, profile, model) -> None:
    """prepare places a later slice on the row its check found: a handle of another
    request (even an open one) is refused before anything changes."""
    rt = make_runtime(env, profile, model)
    h, _ = run(env, rt, BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, PAGE),
                                             RequestSlice(2, Phase.PREFILL, 0, PAGE))))
    one, two = (s.request for s in h.slices)
    used = rt.device[Kind.FULL].used_count
    with pytest.raises(ValueError, match="request 1: its handle is request 2's"):
        rt.prepare_batch(BatchPlan(2, slices=(
            RequestSlice(1, Phase.DECODE, PAGE, 1, request=two),)))
    assert rt.device[Kind.FULL].used_count == used and 2 not in rt._prepared
    nxt, _ = run(env, rt, BatchPlan(2, slices=(  # the same id, the right handles: placed
        RequestSlice(1, Phase.DECODE, PAGE, 1, request=one),
        RequestSlice(2, Phase.DECODE, PAGE, 1, request=two))))
    assert [s.kv.num_pages for s in nxt.slices] == [2, 2]


def test_allocating_beyond_capacity_raises_a_clear_error(env, profile, model) -> None:
    rt = make_runtime(env, profile, model, device_pages={Kind.FULL: 4})
    with pytest.raises(CapacityError, match=r"needs 5 L1 pages of pool 'full', 4 free"):
        rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 5 * PAGE),)))
    assert rt.device[Kind.FULL].free_count == 4  # nothing was placed


def test_release_frees_own_pages_but_not_kept_or_attached_ones(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    cached, _ = run(env, rt, BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 2 * PAGE),)))
    attach = cached.slices[0].kv  # 2 pages the "tree" holds
    h, _ = run(env, rt, BatchPlan(2, slices=(RequestSlice(
        2, Phase.PREFILL, 2 * PAGE, 3 * PAGE, attach=(attach,)),)))
    kv = h.slices[0].kv
    own = kv.slice(2, 5)
    keep = own.slice(0, 2)
    with pytest.raises(ValueError, match="did not allocate"):
        rt.prepare_batch(BatchPlan(3, releases=(Release(h.slices[0].request, keep=kv),)))
    used = rt.device[Kind.FULL].used_count
    run(env, rt, BatchPlan(4, releases=(Release(h.slices[0].request, keep=keep),)))
    assert rt.device[Kind.FULL].used_count == used - 1  # only the one unkept own page
    assert all(rt.device[Kind.FULL].is_allocated(p) for p in [*attach.pages(), *keep.pages()])


def scripted_run(seed_tokens: int = 40):
    """A small mixed workload: prefill, backup, store, decode, load, prefetch, release."""
    env = simpy.Environment()
    profile = toy_profile()
    l3 = L3Store.mooncake(env, profile.mooncake)
    rt = make_runtime(env, profile, toy_model(), l3=l3)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=4 * PAGE, batch_id=0)
    keys = tuple(f"p{i}" for i in range(4))
    a, _ = run(env, rt, BatchPlan(10, slices=(RequestSlice(
        2, Phase.PREFILL, 4 * PAGE, seed_tokens, loads=(LoadIntent(host),)),),
        stores=(StoreIntent(host, keys, job_id=11),)))
    req = a.slices[0].request
    b, done = run(env, rt, BatchPlan(12, slices=(RequestSlice(
        2, Phase.DECODE, 4 * PAGE + seed_tokens, 1, request=req, finishes=True),),
        backups=(BackupIntent(a.slices[0].kv, job_id=13),),
        prefetches=(PrefetchIntent(keys + ("absent",), max_pages=8, min_hit_pages=2,
                                   job_id=14, batch_pages=2),)))
    return env, rt, l3, host, a, b, done


def test_same_inputs_give_identical_timelines() -> None:
    first, second = scripted_run()[1], scripted_run()[1]
    assert first.timeline.as_tuples() == second.timeline.as_tuples()
    assert len(first.timeline) > 10
    assert scripted_run(41)[1].timeline.as_tuples() != first.timeline.as_tuples()


def test_pages_and_bytes_are_conserved() -> None:
    env, rt, l3, host, a, b, done = scripted_run()
    assert rt.bytes_moved == rt.bytes_accounted  # link-measured == page-count-derived
    assert rt.bytes_moved["h2d"] == 4 * rt.bytes_per_page[Kind.FULL]
    for lane in ("h2d", "d2h"):
        assert sum(r.bytes for r in rt.timeline.rows if r.lane == f"pcie:{lane}") == \
            rt.bytes_moved[lane]
    assert rt.l3_bytes["write"] == l3.bytes_written == 4 * rt.bytes_per_page[Kind.FULL]
    assert rt.l3_bytes["read"] == l3.bytes_read
    # hand everything back: every pool is whole again
    device = [a.slices[0].loaded[0]]
    prefetched = [c.extent for c in done
                  if isinstance(c, TransferCompletion) and c.kind is TransferKind.PREFETCH]
    assert [e.num_pages for e in prefetched] == [4]  # p0..p3 hit, "absent" missed
    run(env, rt, BatchPlan(20, releases=(Release(a.slices[0].request),),
                           frees=(*device, host, *b.backups, *prefetched)))
    assert rt.device[Kind.FULL].used_count == 0 and rt.host[Kind.FULL].used_count == 0
    assert rt.open_requests() == 0


def test_double_free_is_an_error(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=PAGE, batch_id=0)
    run(env, rt, BatchPlan(5, frees=(host,)))
    with pytest.raises(ValueError, match="not allocated"):
        rt.prepare_batch(BatchPlan(6, frees=(host,)))


def test_completions_arrive_in_time_order_with_backups_after_compute() -> None:
    _, rt, _, _, _, _, done = scripted_run()
    ends = [c.end for c in done]
    assert ends == sorted(ends)
    batch = next(c for c in done if isinstance(c, BatchCompletion))
    backup = next(c for c in done if getattr(c, "kind", None) is TransferKind.BACKUP)
    assert batch.finished == (2,) and backup.end > batch.end
    rows = {r.op: r for r in rt.timeline.rows if r.batch == 12}
    assert rows["backup"].start >= rows["decode"].end  # D2H waits on the compute event


def test_store_skips_keys_l3_has_and_prefetch_fetches_the_hit_prefix(env, profile, model) -> None:
    l3 = L3Store.mooncake(env, profile.mooncake)
    rt = make_runtime(env, profile, model, l3=l3)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=3 * PAGE, batch_id=0)
    keys = ("a", "b", "c")
    _, done = run(env, rt, BatchPlan(5, stores=(StoreIntent(host, keys, 1),)))
    assert [(c.kind, c.pages) for c in done if isinstance(c, TransferCompletion)] == \
        [(TransferKind.STORE, 3)]
    _, done = run(env, rt, BatchPlan(6, stores=(StoreIntent(host, keys, 2),)))
    assert [c.pages for c in done if isinstance(c, TransferCompletion)] == [0]
    free = rt.host[Kind.FULL].free_count
    _, done = run(env, rt, BatchPlan(7, prefetches=(
        PrefetchIntent(("a", "b", "x", "c"), max_pages=4, min_hit_pages=1, job_id=3),)))
    (pf,) = [c for c in done if isinstance(c, TransferCompletion)]
    assert pf.kind is TransferKind.PREFETCH
    assert (pf.hit_pages, pf.pages, pf.extent.num_pages) == (2, 2, 2)
    assert rt.host[Kind.FULL].free_count == free - 2  # unused reserved pages went back


def test_prefetch_below_min_hit_pages_is_revoked(env, profile, model) -> None:
    l3 = L3Store.mooncake(env, profile.mooncake)
    rt = make_runtime(env, profile, model, l3=l3)
    l3.keys["a"] = 1
    free = rt.host[Kind.FULL].free_count
    _, done = run(env, rt, BatchPlan(1, prefetches=(
        PrefetchIntent(("a", "b"), max_pages=2, min_hit_pages=2, job_id=1),)))
    (pf,) = [c for c in done if isinstance(c, TransferCompletion)]
    assert (pf.pages, pf.hit_pages, pf.extent) == (0, 1, None)
    assert rt.host[Kind.FULL].free_count == free and l3.bytes_read == 0


def test_a_shared_l3_serves_what_another_replica_stored(env, profile, model) -> None:
    l3 = L3Store.mooncake(env, profile.mooncake)
    r0 = make_runtime(env, profile, model, l3=l3, runtime_id="r0")
    r1 = make_runtime(env, profile, model, l3=l3, runtime_id="r1")
    host = host_copy_of_prefill(r0, env, rid=1, tokens=2 * PAGE, batch_id=0)
    run(env, r0, BatchPlan(5, stores=(StoreIntent(host, ("a", "b"), 1),)))
    _, done = run(env, r1, BatchPlan(1, prefetches=(PrefetchIntent(("a", "b"), 2, 1, 7),)))
    (pf,) = [c for c in done if isinstance(c, TransferCompletion)]
    assert pf.pages == 2 and pf.extent.runtime_id == "r1"


def test_wakeup_fires_when_a_completion_arrives(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    seen = []

    def driver():
        rt.execute_batch(rt.prepare_batch(BatchPlan(
            1, slices=(RequestSlice(1, Phase.PREFILL, 0, 64, finishes=True),))))
        yield rt.completion_event()
        seen.extend((env.now, c) for c in rt.poll())
    env.process(driver())
    env.run()
    ((t, done),) = seen
    assert isinstance(done, BatchCompletion) and done.end == t and done.finished == (1,)


def test_throttled_backups_take_longer(env, profile, model) -> None:
    ends = []
    for throttle in (None, 1e9):
        rt = make_runtime(env, profile, model, backup_throttle_bytes_per_s=throttle,
                          runtime_id=f"t{throttle}")
        h, _ = run(env, rt, BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 8 * PAGE),)))
        t0 = env.now
        _, done = run(env, rt, BatchPlan(2, backups=(BackupIntent(h.slices[0].kv, 1),)))
        ends.append(next(c.end for c in done if isinstance(c, TransferCompletion)) - t0)
    nbytes = 8 * 4 * 16 * 1024
    # 8 calls (K and V of each of 4 layers, as the torch runtime issues them), set up by
    # the copy engine while the previous one moves: one call's fixed cost, then the bytes
    assert ends[1] == pytest.approx(1e-5 + 100_000 / 40e9 + nbytes / 1e9)
    assert ends[0] < ends[1]


def test_a_misplaced_or_stale_load_is_rejected(env, profile, model) -> None:
    """A first slice's load must be an L2 extent of this runtime's generation: an L1
    extent or one from before a restart is named (the load, its request), nothing placed."""
    rt = make_runtime(env, profile, model)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=2 * PAGE, batch_id=0)
    device = CacheExtentRef(rt.runtime_id, rt.generation, Tier.DEVICE, (PageRun(0, 2),))
    free = rt.device[Kind.FULL].free_count
    with pytest.raises(ValueError, match="load of request 5 must be on"):
        rt.prepare_batch(BatchPlan(3, slices=(RequestSlice(
            5, Phase.PREFILL, 4 * PAGE, 1, loads=(LoadIntent(host), LoadIntent(device))),)))
    assert rt.device[Kind.FULL].free_count == free and not rt.rows
    rt.restart()
    with pytest.raises(StaleHandleError, match="load of request 5 has generation"):
        rt.prepare_batch(BatchPlan(4, slices=(RequestSlice(5, Phase.PREFILL, 2 * PAGE, 1,
                                                           loads=(LoadIntent(host),)),)))
