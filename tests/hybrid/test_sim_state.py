"""SimRuntime's SWA and MAMBA pools: per-request pages and slots the runtime keeps itself.

Tiny model, 4-token pages, an 8-token window (2 pages): a request holds the SWA pages of
its last window (plus those a checkpoint pinned), one private MAMBA slot, and each
checkpoint's slot, until its Release keeps or frees them.
"""

from __future__ import annotations

import pytest
import simpy
from hybrid_toys import PAGE, tiny_model

from hicache.runtime.handles import CacheExtentRef, Kind, StaleHandleError
from hicache.runtime.interface import BatchPlan, Phase, Release, RequestSlice
from sim.pools import CapacityError
from sim.runtime import SimRuntime


def runtime(swa: int = 64, mamba: int = 8) -> SimRuntime:
    return SimRuntime(simpy.Environment(), profile="h100-sxm", model=tiny_model(window=8),
                      page_size=PAGE,
                      device_pages={Kind.FULL: 64, Kind.SWA: swa, Kind.MAMBA: mamba},
                      host_pages={Kind.FULL: 0})


def run(rt: SimRuntime, bid: int, *slices: RequestSlice, releases=()):  # noqa: ANN001, ANN201
    h = rt.prepare_batch(BatchPlan(bid, slices=slices, releases=tuple(releases)))
    rt.execute_batch(h)
    rt.env.run()
    rt.poll()
    return h


def held(rt: SimRuntime, pool: str) -> int:
    return rt.device[Kind(pool)].size - rt.device[Kind(pool)].free_count


def test_info_reports_the_state_pools() -> None:
    info = runtime().info()
    assert (info.swa_window, info.mamba) == (8, True)


def test_swa_pages_behind_the_window_are_freed_as_the_request_grows() -> None:
    rt = runtime()
    h = run(rt, 1, RequestSlice(1, Phase.PREFILL, 0, 24))  # 6 pages, window = last 2
    assert held(rt, "swa") == 2 and held(rt, "mamba") == 1  # + the private state slot
    (swa,) = h.slices[0].state
    assert swa.pool is Kind.SWA and swa.num_pages == 2
    req = h.slices[0].request
    run(rt, 2, RequestSlice(1, Phase.DECODE, 24, 1, request=req))
    assert held(rt, "swa") == 3  # page 6 opened; pages 4, 5 still inside the window
    run(rt, 3, releases=(Release(req),))
    assert held(rt, "swa") == held(rt, "mamba") == held(rt, "full") == 0


def test_a_checkpoint_pins_its_window_and_release_keep_hands_it_over() -> None:
    rt = runtime()
    h = run(rt, 1, RequestSlice(1, Phase.PREFILL, 0, 16, checkpoint=True))
    swa, ckpt = h.slices[0].state
    assert (swa.num_pages, ckpt.pool, ckpt.num_pages) == (2, Kind.MAMBA, 1)
    req = h.slices[0].request
    for i in range(12):  # the window moves 3 pages on; the pinned pages stay
        run(rt, 2 + i, RequestSlice(1, Phase.DECODE, 16 + i, 1, request=req))
    assert set(swa.pages()) <= rt.state.rows[req.slot_id].swa_own
    run(rt, 20, releases=(Release(req, keep=(swa, ckpt)),))
    assert held(rt, "swa") == 2 and held(rt, "mamba") == 1  # exactly what was kept
    assert all(rt.device[Kind.SWA].is_allocated(p) for p in swa.pages())


def test_attach_borrows_swa_and_copies_the_checkpoint() -> None:
    rt = runtime()
    h = run(rt, 1, RequestSlice(1, Phase.PREFILL, 0, 16, checkpoint=True))
    swa, ckpt = h.slices[0].state
    first = h.slices[0]
    run(rt, 2, releases=(Release(first.request, keep=(first.kv, swa, ckpt)),))
    h = run(rt, 3, RequestSlice(2, Phase.PREFILL, 16, 4, attach=(first.kv, swa, ckpt)))
    (run_ext,) = h.slices[0].state
    assert list(run_ext.pages())[:2] == list(swa.pages())  # borrowed, then its own page
    run(rt, 4, releases=(Release(h.slices[0].request),))
    assert held(rt, "swa") == 2 and held(rt, "mamba") == 1  # the cached ones untouched


def test_keep_of_pages_the_request_did_not_allocate_is_refused() -> None:
    rt = runtime()
    h = run(rt, 1, RequestSlice(1, Phase.PREFILL, 0, 24))
    stranger = CacheExtentRef(rt.runtime_id, rt.generation, h.slices[0].kv.tier,
                              h.slices[0].state[0].page_runs, Kind.MAMBA)
    with pytest.raises(ValueError, match="did not allocate"):
        rt.prepare_batch(BatchPlan(2, releases=(Release(h.slices[0].request, keep=stranger),)))


def test_state_pools_are_capacity_checked_and_handles_generation_checked() -> None:
    rt = runtime(swa=3)
    with pytest.raises(CapacityError, match="'swa'"):
        rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 16),)))
    assert held(rt, "full") == held(rt, "mamba") == 0  # nothing changed
    rt = runtime()
    h = run(rt, 1, RequestSlice(1, Phase.PREFILL, 0, 16, checkpoint=True))
    _, ckpt = h.slices[0].state
    rt.restart()
    with pytest.raises(StaleHandleError):
        rt.prepare_batch(BatchPlan(2, slices=(RequestSlice(2, Phase.PREFILL, 0, 4,
                                                           attach=(ckpt,)),)))
