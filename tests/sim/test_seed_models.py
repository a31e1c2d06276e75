"""The seed's model presets and what they need: routed experts (which weights a batch
reads), DeepSeek-V4's compressed KV (bytes and attention work), and the TP all-reduce."""

from __future__ import annotations

import math

import pytest
from simtoys import TOY_PROFILE, toy_model, toy_profile

from hicache.model_parts import CompressedKV, MoE
from hicache.modelspec import ModelSpec, load_model_spec
from hicache.schema.errors import InputError
from sim.attention_work import allreduce_time, capped_sum, compressed_work, window_sum
from sim.cost import CostModel
from sim.hardware.profile import load_profile

# (preset, KV bytes per token and rank as each preset's comment derives them, active
# parameters published on the model cards)
PRESETS = [
    ("deepseek-v4-flash-tp8", 21 * 1024 // 4 + 20 * 1024 // 128 + 21 * 256 // 4, 13e9),
    ("deepseek-v4-pro-tp8", 30 * 1024 // 4 + 31 * 1024 // 128 + 30 * 256 // 4, 49e9),
    ("qwen3-5-397b-a17b-tp8", 15 * 2 * 1 * 256 * 2, 17e9),
    ("inkling-small-tp8", 42 * 2 * 1 * 128 * 2, 12e9),
]


@pytest.mark.parametrize(("name", "kv", "active"), PRESETS)
def test_presets_hold_their_documented_kv_bytes_and_active_parameters(name, kv, active):
    m = load_model_spec(name)
    assert m.kv_bytes_per_token() == kv
    params = sum(m.linear_params_per_layer(k) * m.tensor_parallel for k in m.layers)
    params += 2 * m.vocab_size * m.hidden_size  # embedding and LM head
    assert params == pytest.approx(active, rel=0.06)
    assert ModelSpec.from_mapping(m.to_mapping()) == m


def test_plain_presets_map_without_the_new_keys():
    keys = set(load_model_spec("llama-3-8b").to_mapping())
    assert not keys & {"moe", "compression", "attention_params"}


def test_touched_experts_grow_from_top_k_to_all_of_them():
    moe = MoE(experts=256, top_k=6, shared=1, expert_ffn=2048)
    assert moe.touched(1) == pytest.approx(6)
    assert moe.touched(64) == pytest.approx(256 * (1 - (250 / 256) ** 64))
    assert 190 < moe.touched(64) < 200
    assert moe.touched(10_000) == pytest.approx(256)
    assert moe.active_ffn == 7 * 2048


def test_moe_decode_reads_more_weights_at_a_larger_batch():
    m = toy_model(ffn_size=3 * 512, moe={"experts": 64, "top_k": 2, "shared": 1,
                                         "expert_ffn": 512})
    one, many = m.weight_bytes_per_layer("full", 1), m.weight_bytes_per_layer("full", 256)
    per_expert = 3 * 1024 * 512 * 1.0  # expert_weight_bytes defaults to 1 (FP8)
    assert many - one == pytest.approx((m.moe.touched(256) - 2) * per_expert)
    assert 60 < m.moe.touched(256) < 64  # nearly every expert, never more
    assert many < one + 62 * per_expert


def test_moe_width_and_compression_shapes_are_checked_with_the_key_named():
    with pytest.raises(InputError, match="ffn_size.*active width"):
        ModelSpec.from_mapping({**_toy(), "moe": {"experts": 8, "top_k": 2,
                                                  "expert_ffn": 100}})
    with pytest.raises(InputError, match="ratios"):
        ModelSpec.from_mapping({**_toy(num_kv_heads=1), "compression": {
            "ratios": [0, 4], "entry_bytes": 1024}})
    with pytest.raises(ValueError, match="index_ratio"):
        CompressedKV(ratios=(4, 128), entry_bytes=1024, index_ratio=4)
    with pytest.raises(InputError, match="every layer must be 'full'"):
        ModelSpec.from_mapping({**_toy(layers=["full", "swa", "full", "full"]),
                                "compression": {"ratios": [0, 4, 128, 4],
                                                "entry_bytes": 1024}})


def _toy(**kw):
    from simtoys import TOY_MODEL

    return {**TOY_MODEL, **kw}


def test_compressed_page_bytes_follow_each_layers_ratio():
    c = CompressedKV(ratios=(0, 4, 128, 1), entry_bytes=1024, index_ratio=4, index_topk=8,
                     index_heads=4, index_head_dim=64, index_entry_bytes=256)
    assert [c.page_bytes(i, 256) for i in range(4)] == [0, 64 * 1280, 2 * 1024, 256 * 1024]
    m = toy_model(num_kv_heads=1, compression={"ratios": [0, 4, 128, 1], "entry_bytes": 1024,
                                               "index_ratio": 4, "index_topk": 8,
                                               "index_heads": 4, "index_head_dim": 64,
                                               "index_entry_bytes": 256})
    assert m.kv_bytes_per_page(256) == {"full": 64 * 1280 + 2 * 1024 + 256 * 1024, "swa": 0}
    assert m.kv_bytes_per_token() == math.ceil(1280 / 4 + 1024 / 128 + 1024)


def test_ratio_one_layers_attend_every_token_without_a_window_branch():
    c = CompressedKV(ratios=(0, 1), entry_bytes=512)
    pairs = [compressed_work(c, i, 512, 8, (), (100_000,))[0] for i in range(2)]
    assert pairs == [pytest.approx(512), pytest.approx(100_001)]


def test_closed_forms_equal_the_sums_they_stand_for():
    for n, c, r, cap in [(1, 0, 4, 8), (100, 0, 4, 8), (100, 50, 4, 8), (7, 1000, 128, 3)]:
        brute = sum(min(p / r, cap) for p in range(c + 1, c + n + 1))
        assert capped_sum(n, c, r, cap) == pytest.approx(brute)
    assert window_sum(300, 0, 128) == pytest.approx(sum(min(p, 128) for p in range(1, 301)))


def test_compressed_attention_is_linear_in_context_where_full_attention_is_quadratic():
    c = CompressedKV(ratios=(0, 4, 128), entry_bytes=1024, index_ratio=4, index_topk=512,
                     index_heads=64, index_head_dim=128, index_entry_bytes=256)
    window = 128
    # decode at context 100k: window only / top-k of the C4 entries / every C128 entry
    pairs = [compressed_work(c, i, window, 8, (), (100_000,))[0] for i in range(3)]
    assert pairs == [pytest.approx(128), pytest.approx(128 + 512),
                     pytest.approx(128 + 100_001 / 128)]
    # the C4 layer's indexer scores all (c + 1) / 4 entries with 64/8 heads x 128
    _, index_flops, read = compressed_work(c, 1, window, 8, (), (100_000,))
    assert index_flops == pytest.approx(2 * 8 * 128 * 100_001 / 4)
    assert read == pytest.approx((128 + 512) * 1024 + 256 * 100_001 / 4)


def test_a_deepseek_v4_long_prefill_costs_far_less_than_the_same_with_full_attention():
    hw = load_profile("h200-hgx-8gpu")
    flash = load_model_spec("deepseek-v4-flash-tp8")
    plain = ModelSpec.from_mapping({k: v for k, v in flash.to_mapping().items()
                                    if k != "compression"})
    long_c = CostModel(hw, flash).batch_layer_times([(8192, 400_000)], ())
    long_f = CostModel(hw, plain).batch_layer_times([(8192, 400_000)], ())
    short_c = CostModel(hw, flash).batch_layer_times([(8192, 0)], ())
    assert sum(long_f) > 10 * sum(long_c)
    assert sum(short_c) < sum(long_c) < 4 * sum(short_c)  # the indexer still grows


def test_the_allreduce_is_paid_only_with_tensor_parallelism_and_a_fabric():
    assert allreduce_time(8e6, 8, 400e9, 1e-5) == pytest.approx(1e-5 + 2 * 7 / 8 * 8e6 / 400e9)
    assert allreduce_time(8e6, 1, 400e9, 1e-5) == 0.0
    fabric = load_profile({**TOY_PROFILE, "interconnect": {"allreduce_bytes_per_s": 100e9,
                                                           "latency_s": 0.0}})
    tp8 = toy_model(tensor_parallel=8)
    with_ar = CostModel(fabric, tp8).prefill_layer_time(1000, 0)
    without = CostModel(toy_profile(), tp8).prefill_layer_time(1000, 0)
    assert with_ar - without == pytest.approx(2 * 2 * 7 / 8 * 1000 * 1024 * 2 / 100e9)
    assert CostModel(fabric, toy_model()).allreduce_s(1000) == 0.0


def test_a_misspelt_interconnect_key_is_refused():
    with pytest.raises(ValueError, match="interconnect.latency"):
        load_profile({**TOY_PROFILE, "interconnect": {"allreduce_bytes_per_s": 1e11,
                                                      "latency": 1e-5}})
