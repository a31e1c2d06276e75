"""Layer-wise loads overlap compute: closed forms for hidden and transfer-bound loads.

Toy model: 4 full layers, page 16 tokens, 16 KiB per page per layer; direct backend
(copy-engine DMA: no SM cost), so a layer's load of P contiguous pages is two calls (K and
V, as the torch runtime issues them), pipelined on the copy engine (sim.copy_engine):
n calls of B bytes in all take c + max(B / 50 GB/s, (n - 1) c + B / n / 50 GB/s), with
c = call_overhead + half_efficiency_bytes / 50 GB/s.
"""

from __future__ import annotations

import pytest
from simtoys import host_copy_of_prefill, make_runtime

from hicache.runtime.interface import BatchCompletion, BatchPlan, LoadIntent, Phase, RequestSlice

LAYERS, PAGE, PAGE_LAYER_BYTES = 4, 16, 16 * 1024


def copy_time(profile, calls: int, nbytes: float) -> float:
    pcie = profile.pcie
    rate = pcie.h2d_bytes_per_s
    c = pcie.call_overhead_s + pcie.half_efficiency_bytes / rate
    return c + max(nbytes / rate, (calls - 1) * c + nbytes / calls / rate)


def load_layer_time(profile, pages: int) -> float:
    return copy_time(profile, 2, pages * PAGE_LAYER_BYTES)


def run_loaded_prefill(env, rt, host, new_tokens, batch_id=10):
    """Prepare and execute one batch that loads ``host`` and prefills ``new_tokens``."""
    t0 = env.now
    ctx = host.num_pages * PAGE
    plan = BatchPlan(batch_id, slices=(RequestSlice(
        2, Phase.PREFILL, ctx, new_tokens, loads=(LoadIntent(host),)),))
    rt.execute_batch(rt.prepare_batch(plan))
    env.run()
    done = [c for c in rt.poll() if isinstance(c, BatchCompletion)]
    return t0, done[0].end, ctx


def test_hidden_layerwise_loads_cost_one_layer_of_pipeline_fill(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=64 * PAGE, batch_id=0)
    t0, end, ctx = run_loaded_prefill(env, rt, host, new_tokens=4096)
    t_l, t_c = load_layer_time(profile, 64), rt.cost.prefill_layer_time(4096, ctx)
    assert t_l < t_c  # loads hide behind compute...
    assert end - t0 == pytest.approx(t_l + LAYERS * t_c, rel=1e-9)  # ...except layer 0's


def test_transfer_bound_batch_waits_for_every_layer(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=128 * PAGE, batch_id=0)
    t0, end, ctx = run_loaded_prefill(env, rt, host, new_tokens=16)
    t_l, t_c = load_layer_time(profile, 128), rt.cost.prefill_layer_time(16, ctx)
    assert t_l > t_c
    assert end - t0 == pytest.approx(LAYERS * t_l + t_c, rel=1e-9)


def test_without_layerwise_compute_waits_for_all_loads(env, profile, model) -> None:
    rt = make_runtime(env, profile, model, layerwise=False)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=64 * PAGE, batch_id=0)
    t0, end, ctx = run_loaded_prefill(env, rt, host, new_tokens=4096)
    t_load = copy_time(profile, 2 * LAYERS, LAYERS * 64 * PAGE_LAYER_BYTES)  # one op
    t_c = rt.cost.prefill_layer_time(4096, ctx)
    assert end - t0 == pytest.approx(t_load + LAYERS * t_c, rel=1e-9)


def test_loads_start_at_prepare_and_overlap_the_previous_batch(env, profile, model) -> None:
    """prepare(N+1) during compute of N: N+1's loads finish under N, so N+1 starts at once."""
    rt = make_runtime(env, profile, model)
    host = host_copy_of_prefill(rt, env, rid=1, tokens=64 * PAGE, batch_id=0)
    t0 = env.now
    busy = rt.prepare_batch(BatchPlan(20, slices=(RequestSlice(3, Phase.PREFILL, 0, 4096),)))
    rt.execute_batch(busy)
    plan = BatchPlan(21, slices=(RequestSlice(2, Phase.PREFILL, 64 * PAGE, 4096,
                                              loads=(LoadIntent(host),)),))
    rt.execute_batch(rt.prepare_batch(plan))
    env.run()
    first, second = [c for c in rt.poll() if isinstance(c, BatchCompletion)]
    t_busy = LAYERS * rt.cost.prefill_layer_time(4096, 0)
    assert first.end - t0 == pytest.approx(t_busy)
    assert second.start == first.end
    assert second.end - first.end == pytest.approx(
        LAYERS * rt.cost.prefill_layer_time(4096, 64 * PAGE))  # no fill left to pay
    loads = [r for r in rt.timeline.rows if r.lane == "h2d" and r.batch == 21]
    assert len(loads) == LAYERS and loads[-1].end < first.end


def test_compute_bound_batch_without_loads_matches_the_cost_model(env, profile, model) -> None:
    rt = make_runtime(env, profile, model)
    plan = BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 2048),
                                RequestSlice(2, Phase.PREFILL, 0, 1024)))
    rt.execute_batch(rt.prepare_batch(plan))
    env.run()
    (done,) = rt.poll()
    per_layer = rt.cost.layer_time("full", [(2048, 0), (1024, 0)])
    assert done.end == pytest.approx(LAYERS * per_layer)
    rows = [r for r in rt.timeline.rows if r.lane == "compute"]
    assert len(rows) == 1 and rows[0].layer == -1  # fast path: one row per batch


def test_trace_layers_emits_one_compute_row_per_layer(env, profile, model) -> None:
    rt = make_runtime(env, profile, model, trace_layers=True)
    plan = BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 64),))
    rt.execute_batch(rt.prepare_batch(plan))
    env.run()
    assert [r.layer for r in rt.timeline.rows if r.lane == "compute"] == [0, 1, 2, 3]


def test_copy_kernels_slow_the_compute_they_overlap(env, profile, model) -> None:
    """kernel backend: the same hidden load costs extra compute time (10% while copying)."""
    direct, kernel = (make_runtime(env, profile, model, io_backend=b, runtime_id=b)
                      for b in ("direct", "kernel"))
    times = []
    for rt in (direct, kernel):
        host = host_copy_of_prefill(rt, env, rid=1, tokens=64 * PAGE, batch_id=0)
        t0, end, _ = run_loaded_prefill(env, rt, host, new_tokens=4096)
        times.append(end - t0)
    assert times[1] > times[0]
