"""SGLang in: launch commands and server_args dumps map onto scenarios, naming what they
ignore; Hugging Face configs become model presets with the right KV bytes."""

from __future__ import annotations

import json

import pytest
import yaml

from hicache.cli import main
from hicache.presets import find_preset, known
from hicache.sglang.hf_config import HFConfigError, preset_from_hf
from hicache.sglang.launch import LaunchError, read_server_args
from hicache.sglang.mapping import MappingError, device_tokens, map_server_args
from sim.hardware.model import load_model

LAUNCH = ("python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B-Instruct "
          "--enable-hierarchical-cache --hicache-ratio 2 --page-size 64 --max-total-tokens 4M "
          "--hicache-write-policy write_back --hicache-io-backend direct "
          "--hicache-mem-layout layer_first --hicache-storage-backend mooncake "
          "--hicache-storage-prefetch-policy wait_complete --radix-eviction-policy lfu "
          "--max-running-requests 48 --chunked-prefill-size 4096 --disable-overlap-schedule "
          "--tp-size 2 --dp-size 3 --host 0.0.0.0 --port=30000 --trust-remote-code")


def test_a_launch_command_maps_every_relevant_flag_and_names_the_rest() -> None:
    fields, source = read_server_args(LAUNCH)
    assert source == "--from-sglang" and fields["port"] == "30000"
    m = map_server_args(fields)
    assert m.cache == {
        "page_size": 64, "enable_hierarchical_cache": True, "hicache_ratio": 2.0,
        "hicache_write_policy": "write_back", "hicache_io_backend": "direct",
        "hicache_mem_layout": "layer_first", "hicache_storage_backend": "mooncake",
        "hicache_storage_prefetch_policy": "wait_complete", "radix_eviction_policy": "lfu",
        "device_tokens": 4_000_000}
    assert m.scheduler == {"max_running_requests": 48, "chunked_prefill_size": 4096,
                           "overlap": False}
    assert (m.tensor_parallel, m.replicas, m.mem_fraction_static) == (2, 3, None)
    assert m.ignored == ["--host", "--port", "--trust-remote-code"] and m.assumed == []


def test_unset_flags_take_sglang_defaults_and_say_so() -> None:
    m = map_server_args(read_server_args(
        "python -m sglang.launch_server --model-path m --enable-hicache "
        "--hicache-storage-backend file --hicache-host-memory-mode buffer_only")[0])
    assert m.cache["page_size"] == 1 and m.cache["hicache_mem_layout"] == "page_first"
    assert m.cache["hicache_storage_prefetch_policy"] == "timeout"
    assert m.cache["hicache_buffer_only"] and m.cache["hicache_ratio"] == 1.2
    assert m.mem_fraction_static == 0.85
    assert any("--mem-fraction-static 0.85" in a for a in m.assumed)
    assert any("--page-size 1" in a for a in m.assumed)


@pytest.mark.parametrize("flags, message", [
    ("--disable-radix-cache", "--disable-radix-cache: without a radix cache"),
    ("--hicache-storage-backend hf3fs", "--hicache-storage-backend hf3fs: not modelled"),
    ("--radix-eviction-policy tlru", "supported: lru, lfu, slru, priority"),
    ("--max-total-tokens 1.5", "--max-total-tokens: '1.5' is not a whole number"),
    ("--mem-fraction-static 1.5", "--mem-fraction-static: 1.5 out of range"),
    ("--pp-size 2", "--pp-size: pipeline parallelism is not modelled"),
])  # fmt: skip
def test_flags_we_cannot_honour_are_refused_by_name(flags: str, message: str) -> None:
    with pytest.raises(MappingError, match=message.replace("(", r"\(")):
        map_server_args(read_server_args(f"python -m sglang.launch_server {flags}")[0])


def test_server_args_dumps_read_like_the_command(tmp_path) -> None:
    as_json = tmp_path / "server_args.json"
    as_json.write_text(json.dumps({"server_args": {"model_path": "m", "page_size": 32,
                                                   "enable_hierarchical_cache": True}}))
    logged = tmp_path / "log.txt"
    logged.write_text("[2026] server_args=ServerArgs(model_path='m', page_size=32, "
                      "enable_hierarchical_cache=True, hicache_ratio=3.0, port=30000)\n")
    cmd = tmp_path / "launch.sh"
    cmd.write_text("# our server\npython -m sglang.launch_server \\\n  --model-path m \\\n"
                   "  --page-size 32 --enable-hierarchical-cache\n")
    for path in (as_json, logged, cmd):
        fields, source = read_server_args(str(path))
        assert source == str(path)
        m = map_server_args(fields)
        assert m.cache["page_size"] == 32 and m.cache["enable_hierarchical_cache"], path
    assert map_server_args(read_server_args(str(logged))[0]).ignored == ["--port"]


def test_unreadable_server_args_fail_clearly(tmp_path) -> None:
    with pytest.raises(LaunchError, match="no such file"):
        read_server_args("missing.json")
    with pytest.raises(LaunchError, match="expected an SGLang launch command"):
        read_server_args("vllm serve m --port 1")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(LaunchError, match="line 1: not valid JSON"):
        read_server_args(str(tmp_path / "bad.json"))


def test_pool_size_from_memory_fraction_is_sglangs_formula() -> None:
    assert device_tokens(80 << 30, 0.5, 10 << 30, 1 << 17) == (30 << 30) // (1 << 17)
    with pytest.raises(MappingError, match="does not hold the weights"):
        device_tokens(16 << 30, 0.5, 10 << 30, 1 << 17)


# Shapes as published in each model's config.json on the Hugging Face hub.
LLAMA3_8B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "hidden_size": 4096, "intermediate_size": 14336, "torch_dtype": "bfloat16",
             "vocab_size": 128256}
DEEPSEEK_V3 = {"num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
               "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "num_experts_per_tok": 8, "n_shared_experts": 1, "kv_lora_rank": 512,
               "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}
GEMMA3_LIKE = {"num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "hidden_size": 2560, "intermediate_size": 10240,
               "sliding_window": 1024, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}
NEMOTRON_H_LIKE = {"num_hidden_layers": 8, "hybrid_override_pattern": "M-M*-M-M*-",
                   "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "hidden_size": 4096, "intermediate_size": 21504, "mamba_num_heads": 128,
                   "mamba_head_dim": 64, "ssm_state_size": 128, "conv_kernel": 4,
                   "n_groups": 8, "torch_dtype": "bfloat16"}


def test_llama3_config_gives_the_llama3_preset_exactly() -> None:
    preset, notes = preset_from_hf(LLAMA3_8B, name="llama-3-8b")
    ours = load_model("llama-3-8b")
    got = load_model(preset)
    assert got.kv_bytes_per_token() == ours.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2
    assert [getattr(got, f) for f in ("num_layers", "num_heads", "num_kv_heads", "head_dim",
                                      "hidden_size", "ffn_size", "layer_kinds")] == \
        [getattr(ours, f) for f in ("num_layers", "num_heads", "num_kv_heads", "head_dim",
                                    "hidden_size", "ffn_size", "layer_kinds")]
    assert notes == []


def test_mla_keeps_one_latent_per_token_and_layer_on_every_rank() -> None:
    preset, notes = preset_from_hf(DEEPSEEK_V3, name="dsv3", tensor_parallel=8)
    model = load_model(preset)
    assert model.kv_bytes_per_token() == 61 * (512 + 64) * 2  # 70,272 bytes, not 128 heads
    assert preset["ffn_size"] == 2048 * 9 and any("MLA" in n for n in notes)


def test_sliding_window_pattern_and_hybrid_patterns_give_layer_kinds() -> None:
    gemma, _ = preset_from_hf(GEMMA3_LIKE, name="g")
    assert gemma["layers"] == ["swa"] * 5 + ["full"] + ["swa"] * 5 + ["full"]
    assert gemma["sliding_window"] == 1024
    nem, _ = preset_from_hf(NEMOTRON_H_LIKE, name="n")
    assert nem["layers"] == ["mamba", "mamba", "full", "mamba", "mamba", "full"]
    d_inner = 128 * 64
    assert nem["mamba_state_bytes"] == d_inner * 128 * 4 + 4 * (d_inner + 2 * 8 * 128) * 2
    mistral, _ = preset_from_hf({**LLAMA3_8B, "sliding_window": 4096}, name="m")
    assert mistral["layers"] == "swa"
    typed, _ = preset_from_hf({**LLAMA3_8B, "num_hidden_layers": 2, "layer_types": [
        "sliding_attention", "full_attention"], "sliding_window": 128}, name="t")
    assert typed["layers"] == ["swa", "full"]


# DeepSeek-V4-Flash's config.json (the keys the import reads; huggingface.co/deepseek-ai)
DEEPSEEK_V4_FLASH = {
    "num_hidden_layers": 43, "hidden_size": 4096, "num_attention_heads": 64,
    "num_key_value_heads": 1, "head_dim": 512, "q_lora_rank": 1024, "o_lora_rank": 1024,
    "o_groups": 8, "sliding_window": 128, "index_topk": 512, "index_n_heads": 64,
    "index_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "vocab_size": 129280,
    "torch_dtype": "bfloat16", "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0]}


def test_deepseek_v4_config_gives_the_seed_studys_preset() -> None:
    preset, notes = preset_from_hf(DEEPSEEK_V4_FLASH, name="deepseek-v4-flash-tp8",
                                   tensor_parallel=8)
    got, ours = load_model(preset).to_mapping(), load_model("deepseek-v4-flash-tp8").to_mapping()
    assert got["moe"].pop("expert_weight_bytes") == 2.0  # the config says no FP4
    ours["moe"].pop("expert_weight_bytes")
    got.update(vocab_size=ours["vocab_size"])  # the import leaves the LM head out
    assert got == ours
    assert any("DeepSeek-V4" in n for n in notes)
    with pytest.raises(HFConfigError, match="compress_ratios"):
        preset_from_hf({**DEEPSEEK_V4_FLASH, "compress_ratios": [4] * 3}, name="x")


def test_a_shared_expert_given_by_width_counts_as_active() -> None:
    qwen = {**LLAMA3_8B, "num_experts": 512, "num_experts_per_tok": 10,
            "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024}
    preset, _ = preset_from_hf(qwen, name="q")
    assert preset["ffn_size"] == 11 * 1024
    assert preset["moe"] == {"experts": 512, "top_k": 10, "shared": 1, "expert_ffn": 1024,
                             "expert_weight_bytes": 2.0}


def test_a_config_missing_a_shape_names_the_key() -> None:
    with pytest.raises(HFConfigError, match="cfg.json: missing key 'num_hidden_layers'"):
        preset_from_hf({"hidden_size": 8}, name="x", source="cfg.json")
    with pytest.raises(HFConfigError, match="layer_types has unknown kinds"):
        preset_from_hf({**LLAMA3_8B, "num_hidden_layers": 1, "layer_types": ["moe"]}, name="x")


def test_run_from_sglang_simulates_the_servers_config(tmp_path, capsys) -> None:
    model = tmp_path / "Llama-Local"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA3_8B))
    cmd = (f"python -m sglang.launch_server --model-path {model} --enable-hierarchical-cache "
           "--hicache-ratio 3 --page-size 64 --mem-fraction-static 0.2 --port 1")
    out = tmp_path / "out"
    rc = main(["run", "--from-sglang", cmd, "--gpu-memory", "80GiB", "--out", str(out),
               "--no-progress", "--no-plots", "--set", "workload.num_clients=4",
               "--set", "workload.num_rounds=2"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "ignored (no effect on caching or scheduling here): --port" in cap.err
    d = yaml.safe_load((out / "sglang" / "scenario.yaml").read_text())
    weights = 32 * load_model("llama-3-8b").linear_params_per_layer("full") * 2 \
        + 2 * 128256 * 4096 * 2
    assert d["cache"]["device_tokens"] == int((0.2 * (80 << 30) - weights) // (128 << 10))
    assert d["cache"]["hicache_ratio"] == 3 and d["model"]["name"] == "llama-local"
    summary = json.loads((out / "sglang" / "summary.json").read_text())
    assert summary["n_finished"] == 8 and summary["l2_tokens"] > 0


def test_run_from_sglang_without_a_known_model_says_what_to_pass(tmp_path, capsys) -> None:
    rc = main(["run", "--from-sglang", "python -m sglang.launch_server --model-path org/New",
               "--out", str(tmp_path / "o")])
    assert rc == 2 and "--model-config" in capsys.readouterr().err


@pytest.mark.parametrize("name", known("hardware"))
def test_every_shipped_gpu_profile_knows_its_memory(name: str) -> None:
    """SGLang sizes L1 from --mem-fraction-static and the GPU's memory: a launch command
    without --max-total-tokens must run on every shipped profile, with no --gpu-memory."""
    data = yaml.safe_load(find_preset("hardware", name).read_text())
    assert data["gpu"].get("memory_bytes", 0) >= 16 << 30, name
