"""Hybrid models: which layers a pool's page spans, and real presets end to end."""

from __future__ import annotations

import simpy
from simtoys import host_copy_of_prefill

from hicache.runtime.handles import Kind
from hicache.runtime.interface import BatchPlan, LoadIntent, Phase, RequestSlice
from sim.hardware.model import load_model
from sim.runtime import SimRuntime

HYBRID = load_model("hybrid-swa-mamba")  # 4 full, 4 swa, 24 mamba layers
PER_LAYER_PAGE = 64 * 2 * 8 * 128 * 2  # 64 tokens x K,V x 8 kv heads x 128 x bf16


def hybrid_runtime(env, **pools):
    return SimRuntime(env, profile="h100-sxm", model=HYBRID, page_size=64,
                      device_pages={Kind.FULL: 512, **pools}, host_pages={Kind.FULL: 512, **pools},
                      io_backend="direct")


def test_swa_kv_rides_on_full_pages_unless_it_has_its_own_pool() -> None:
    env = simpy.Environment()
    assert hybrid_runtime(env).info().bytes_per_page == {Kind.FULL: 8 * PER_LAYER_PAGE}
    split = hybrid_runtime(env, swa=256, mamba=16).info().bytes_per_page
    assert split == {Kind.FULL: 4 * PER_LAYER_PAGE, Kind.SWA: 4 * PER_LAYER_PAGE,
                     Kind.MAMBA: 24 * HYBRID.mamba_state_bytes}


def test_loads_copy_only_the_layers_that_hold_kv_and_mamba_layers_do_not_wait() -> None:
    env = simpy.Environment()
    rt = hybrid_runtime(env)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=8 * 64, batch_id=0)
    plan = BatchPlan(9, slices=(RequestSlice(2, Phase.PREFILL, 8 * 64, 64,
                                             loads=(LoadIntent(host),)),))
    rt.execute_batch(rt.prepare_batch(plan))
    env.run()
    loads = [r for r in rt.timeline.rows if r.lane == "h2d" and r.batch == 9]
    attention = [i for i, k in enumerate(HYBRID.layer_kinds) if k != "mamba"]
    assert [r.layer for r in loads] == attention
    assert all(r.bytes == 8 * PER_LAYER_PAGE for r in loads)
    assert rt.bytes_moved["h2d"] == rt.bytes_accounted["h2d"] == 8 * rt.bytes_per_page[Kind.FULL]
    compute = [r for r in rt.timeline.rows if r.lane == "compute" and r.batch == 9]
    assert compute[0].layer == 0 and HYBRID.layer_kinds[0] == "mamba"
    assert compute[0].start < loads[0].end  # a mamba layer needs no loaded KV


def test_shipped_presets_run_a_decode_step_on_h200() -> None:
    env = simpy.Environment()
    rt = SimRuntime(env, profile="h200-sxm", model="llama-3-70b-tp8", page_size=64,
                    device_pages={Kind.FULL: 4096}, host_pages={Kind.FULL: 8192})
    first = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 1000),)))
    rt.execute_batch(first)
    rt.execute_batch(rt.prepare_batch(BatchPlan(2, slices=(RequestSlice(
        1, Phase.DECODE, 1000, 1, request=first.slices[0].request),))))
    env.run()
    prefill, decode = rt.poll()
    weights_read = 80 * rt.cost.params["full"] * 2 / 4.3e12  # decode is HBM-bound
    assert decode.end - decode.start >= weights_read
    assert decode.end - decode.start < prefill.end - prefill.start
