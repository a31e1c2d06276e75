"""The compute cost model: a per-layer roofline, or calibrated tables when present."""

from __future__ import annotations

import pytest
from simtoys import TOY_PROFILE, toy_model, toy_profile

from sim.cost import CostModel, attended_pairs, interp_loglog
from sim.hardware.profile import load_profile

PEAK = 1.0e15 * 0.5  # toy bf16_flops x matmul_efficiency
HBM = 2.0e12


def test_compute_bound_prefill_matches_the_closed_form(model) -> None:
    """A 4096-token prefill from an empty context is FLOP-bound."""
    cost = CostModel(toy_profile(), model)
    n, h, heads, hd = 4096, 1024, 8, 128
    params = 2 * h * heads * hd + 2 * h * 2 * hd + 3 * h * 4096
    flops = 2 * n * params + 4 * heads * hd * (n * (n + 1) / 2)
    assert cost.prefill_layer_time(n, 0) == pytest.approx(flops / PEAK, rel=1e-12)


def test_memory_bound_decode_matches_the_closed_form(model) -> None:
    """One decode token at context 1000 is bound by reading weights and KV from HBM."""
    cost = CostModel(toy_profile(), model)
    h, heads, hd = 1024, 8, 128
    params = 2 * h * heads * hd + 2 * h * 2 * hd + 3 * h * 4096
    kv_token = 2 * 2 * hd * 2
    nbytes = params * 2 + 1 * 2 * h * 2 + (1001 + 1) * kv_token
    assert cost.decode_layer_time([1000]) == pytest.approx(nbytes / HBM, rel=1e-12)


def test_attention_work_grows_with_context_but_swa_is_capped_at_its_window() -> None:
    assert attended_pairs(1, 999, None) == 1000
    assert attended_pairs(1, 999, 256) == 256
    assert attended_pairs(4, 0, 2) == 1 + 2 + 2 + 2
    cost = CostModel(toy_profile(), toy_model(layers=["full", "swa", "mamba", "full"]))
    short = [cost.prefill_layer_time(2048, 0, kind) for kind in ("full", "swa", "mamba")]
    long = [cost.prefill_layer_time(2048, 60000, kind) for kind in ("full", "swa", "mamba")]
    assert long[0] > 5 * short[0]  # full attention: quadratic in context
    assert long[1] == pytest.approx(short[1], rel=0.2)  # swa: window-bounded
    assert long[2] == short[2]  # mamba: no context dependence


def test_mamba_cost_is_linear_in_tokens() -> None:
    cost = CostModel(toy_profile(), toy_model(layers=["mamba"] * 4))
    t1, t2 = cost.prefill_layer_time(8192, 0, "mamba"), cost.prefill_layer_time(16384, 0, "mamba")
    assert t2 == pytest.approx(2 * t1, rel=1e-9)


def test_kernel_launch_is_added_per_layer(model) -> None:
    slow = CostModel(toy_profile(gpu={"kernel_launch_s": 1e-3}), model)
    fast = CostModel(toy_profile(), model)
    assert slow.decode_layer_time([10]) - fast.decode_layer_time([10]) == pytest.approx(1e-3)


def test_calibrated_tables_replace_the_analytic_model(model) -> None:
    data = {**TOY_PROFILE, "calibrated": {
        "device": "cpu", "prefill_layer": [[100, 1.0e-3], [10000, 1.0e-1]],
        "decode_layer": [[1, 1.0e-4], [100, 1.0e-3]]}}
    cost = CostModel(load_profile(data), model)
    assert cost.prefill_layer_time(100, 0) == pytest.approx(1e-3)
    assert cost.prefill_layer_time(1000, 0) == pytest.approx(1e-2)  # log-log midpoint
    assert cost.decode_layer_time([5] * 10) == pytest.approx(10 ** -3.5)
    assert cost.layer_time("full", [(100, 0)], [1]) == pytest.approx(1.1e-3)


def test_loglog_interpolation_extrapolates_the_end_slope() -> None:
    table = ((1.0, 1.0), (10.0, 100.0))  # slope 2 in log-log
    assert interp_loglog(table, 100.0) == pytest.approx(10000.0)
    assert interp_loglog(((4.0, 2.0),), 8.0) == pytest.approx(4.0)
    assert interp_loglog(table, 0) == 0.0


def _pairs_keys_per_request(prefills, decodes, window):  # noqa: ANN001, ANN202
    """The attention sums of CostModel._work as their definition: request by request."""
    pairs, keys = 0.0, 0
    for n, c in prefills:
        pairs += attended_pairs(n, c, window)
        keys += (c + n if window is None else min(c + n, window)) + n
    for c in decodes:
        pairs += c + 1 if window is None else min(c + 1, window)
        keys += (c + 1 if window is None else min(c + 1, window)) + 1
    return pairs, keys


@pytest.mark.parametrize("model_name", ["llama-3-8b", "hybrid-swa-mamba", "llama-3-70b-tp8"])
def test_layer_work_is_the_per_request_sum_bit_for_bit(model_name: str) -> None:
    """_work's decode sums (one sum of the contexts without a window) give the floats the
    request-by-request loop gives, for decode and mixed batches, inside and past a window."""
    from sim.hardware.model import load_model

    cost = CostModel(load_profile("h100-sxm"), load_model(model_name))
    batches = [((), [0]), ((), [4090, 17, 4094, 63, 64, 100_000]),
               (((512, 0), (3, 4093)), list(range(1, 200, 7))), (((8192, 123_456),), [5])]
    for kind in sorted(set(cost.model.layer_kinds) - {"mamba"}):
        window = cost._window(kind)  # noqa: SLF001
        per_pair, kv = cost.attn_flops_per_pair, cost.kv_token[kind]
        for prefills, decodes in batches:
            flops, nbytes = cost._work(kind, prefills, decodes)  # noqa: SLF001
            pairs, keys = _pairs_keys_per_request(prefills, decodes, window)
            tokens = sum(n for n, _ in prefills) + len(decodes)
            base = 2.0 * tokens * cost.params[kind]
            weights = (cost.model.weight_bytes_per_layer(kind, tokens)
                       + tokens * cost.act_bytes_per_token)
            assert (flops, nbytes) == (base + per_pair * pairs, weights + keys * kv)


def _roofline(cost: CostModel, kind: str, decodes: list[int]) -> float:
    """layer_time of a decode-only batch as _work and the roofline give it."""
    flops, nbytes = cost._work(kind, (), decodes)  # noqa: SLF001
    return (max(flops / cost.flops_per_s, nbytes / cost.hbm) + cost.launch
            + cost.allreduce_s(len(decodes)))


@pytest.mark.parametrize("model_name", ["llama-3-8b", "hybrid-swa-mamba", "llama-3-70b-tp8",
                                        "qwen3-5-397b-a17b-tp8", "deepseek-v4-flash-tp8"])
def test_decode_layers_keep_their_size_terms_bit_for_bit(model_name: str) -> None:
    """A decode-only layer keeps the terms of its batch size (flops, weights, all-reduce)
    per (kind, size): every kind, asked in turn with the same sizes, gives the floats of
    _work and the roofline (MoE weights grow with the tokens; a window or a recurrent
    state takes _work itself; compressed KV the general path)."""
    from sim.hardware.model import load_model

    fabric = {**TOY_PROFILE, "interconnect": {"allreduce_bytes_per_s": 100e9,
                                               "latency_s": 1e-6}}
    for profile in (load_profile("h100-sxm"), load_profile(fabric)):
        cost = CostModel(profile, load_model(model_name))
        kinds = sorted(set(cost.model.layer_kinds))
        if cost.model.compression is not None:  # its classes price compressed entries
            assert not cost._plain_decode  # noqa: SLF001
            continue
        for decodes in ([5], [4090, 17, 4094], [0, 1], [100_000, 3, 3], [7] * 64, [9],
                        [1] * 4096):  # the last one compute-bound
            for kind in kinds * 2:  # twice: the kept terms answer the second time
                assert cost.layer_time(kind, (), decodes) == _roofline(
                    cost, kind, decodes), (kind, decodes)


def test_sample_times_are_kept_per_size(model) -> None:
    cost = CostModel(toy_profile(), model)
    for n in (0, 1, 7, 1, 300, 7):
        assert cost.sample_time(n) == cost._sample_time(n)  # noqa: SLF001
    assert sorted(cost._samples) == [0, 1, 7, 300]  # noqa: SLF001
