"""A Hugging Face ``config.json`` -> a model preset mapping (the keys of
``scenarios/models/*.yaml``: num_layers, num_heads, num_kv_heads, head_dim, hidden_size,
ffn_size, dtype_bytes, tensor_parallel, layers, sliding_window, mamba_state_bytes).

What is read (names as in transformers' configs):
- shapes: ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (absent:
  as many as attention heads), ``head_dim`` (absent: hidden / heads), ``hidden_size``,
  ``intermediate_size``; MoE: active experts' FFN (``moe_intermediate_size`` x
  (``num_experts_per_tok`` + shared experts)); dtype from ``torch_dtype`` / ``dtype``;
- layer kinds: ``layer_types`` (``full_attention``, ``sliding_attention``,
  ``linear_attention``, ``mamba``...), Jamba's ``layers_block_type``, Nemotron-H's
  ``hybrid_override_pattern`` (``M`` mamba, ``*`` attention, ``-`` MLP-only), Gemma's
  ``sliding_window_pattern``, or a ``sliding_window`` over every layer (Mistral);
  recurrent layers (Mamba, gated delta-net linear attention) become ``mamba`` layers with
  their per-request state size in ``mamba_state_bytes``;
- routed experts (``n_routed_experts`` / ``num_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``; shared experts from ``n_shared_experts`` or
  ``shared_expert_intermediate_size``; ``expert_dtype`` fp4/fp8): the preset's ``moe``;
- DeepSeek-V4 (``compress_ratios``): every layer full with per-layer compression (0: window
  only), entries of ``head_dim`` values at the config's dtype, the lightning indexer
  (``index_topk``, ``index_n_heads``, ``index_head_dim``) on the least-compressed layers,
  and the low-rank / grouped projections (``q_lora_rank``, ``o_lora_rank``, ``o_groups``)
  as ``attention_params``;
- MLA (DeepSeek-V2/V3, Kimi-K2: ``kv_lora_rank``): one compressed latent of
  ``kv_lora_rank + qk_rope_head_dim`` values per token and layer, shared by all heads and
  replicated on every TP rank. The preset schema has no MLA field, so it is written as one
  KV head of half that width (K and V): the KV bytes are exact, the attention FLOPs of
  the cost model are an approximation (noted in the preset's ``source``).
Keys a config lacks raise :class:`HFConfigError` naming the key and the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4,
               "float8_e4m3fn": 1, "fp8": 1}


class HFConfigError(ValueError):
    """A config.json we cannot turn into a preset; the message names file and key."""


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read ``config.json`` (or the ``config.json`` inside a model folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise HFConfigError(f"{p}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise HFConfigError(f"{p}: line {e.lineno}: not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise HFConfigError(f"{p}: expected a JSON object")
    return data


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal configs keep the language model's shapes under ``text_config``."""
    inner = cfg.get("text_config") or cfg.get("llm_config")
    return inner if isinstance(inner, Mapping) and "num_hidden_layers" in inner else cfg


class _Reader:
    def __init__(self, cfg: Mapping[str, Any], source: str) -> None:
        self.cfg, self.source = cfg, source

    def get(self, *keys: str, default: Any = ...) -> Any:
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        if default is ...:
            raise HFConfigError(f"{self.source}: missing key {keys[0]!r}")
        return default

    def int(self, *keys: str, default: Any = ...) -> int:
        v = self.get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise HFConfigError(f"{self.source}: {keys[0]!r} must be a non-negative "
                                f"integer, got {v!r}")
        return v


def _dtype_bytes(r: _Reader) -> int:
    name = str(r.get("torch_dtype", "dtype", default="bfloat16")).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise HFConfigError(f"{r.source}: torch_dtype {name!r} unknown; known: "
                            f"{', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


_KIND = {"full_attention": "full", "attention": "full", "global": "full",
         "sliding_attention": "swa", "sliding_window": "swa", "local": "swa",
         "chunked_attention": "swa",
         "linear_attention": "mamba", "mamba": "mamba", "mamba2": "mamba"}  # fmt: skip


def layer_kinds(r: _Reader, n: int) -> list[str]:
    """Per layer: ``full``, ``swa`` or ``mamba`` (see module docstring for the sources)."""
    if isinstance(r.cfg.get("compress_ratios"), list):
        kinds = ["full"] * n  # DeepSeek-V4: every layer's window is its own branch
    elif isinstance(r.cfg.get("layer_types"), list):
        types = r.cfg["layer_types"]
        unknown = sorted({t for t in types if t not in _KIND})
        if unknown:
            raise HFConfigError(f"{r.source}: layer_types has unknown kinds {unknown}; "
                                f"known: {', '.join(_KIND)}")
        kinds = [_KIND[t] for t in types]
    elif isinstance(r.cfg.get("layers_block_type"), list):
        kinds = [_KIND.get(t, "full") for t in r.cfg["layers_block_type"]]
    elif isinstance(r.cfg.get("hybrid_override_pattern"), str):
        pattern = r.cfg["hybrid_override_pattern"]
        bad = sorted(set(pattern) - set("M*-E"))
        if bad:
            raise HFConfigError(f"{r.source}: hybrid_override_pattern has unknown symbols "
                                f"{bad}; known: M (mamba), * (attention), - and E (MLP)")
        # MLP-only blocks hold no cache: count the mixer blocks (M and *) as the layers
        kinds = ["mamba" if c == "M" else "full" for c in pattern if c in "M*"]
        return kinds
    elif r.cfg.get("sliding_window") and r.cfg.get("sliding_window_pattern"):
        every = r.int("sliding_window_pattern")  # Gemma: every k-th layer is global
        kinds = ["full" if (i + 1) % every == 0 else "swa" for i in range(n)]
    elif r.cfg.get("sliding_window") and r.cfg.get("use_sliding_window", True):
        kinds = ["swa"] * n
    else:
        kinds = ["full"] * n
    if len(kinds) != n:
        raise HFConfigError(f"{r.source}: {len(kinds)} layer types for num_hidden_layers {n}")
    return kinds


def _recurrent_state_bytes(r: _Reader, hidden: int, dtype: int) -> int:
    """Per layer and request: SSM state (fp32) plus convolution state (model dtype)."""
    if r.cfg.get("linear_num_value_heads"):  # gated delta-net (Qwen3-Next)
        v_heads = r.int("linear_num_value_heads")
        k_dim, v_dim = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
        k_heads = r.int("linear_num_key_heads", default=v_heads)
        conv = r.int("linear_conv_kernel_dim", default=4)
        channels = 2 * k_heads * k_dim + v_heads * v_dim
        return v_heads * k_dim * v_dim * 4 + conv * channels * dtype
    d_state = r.int("mamba_d_state", "ssm_state_size", "state_size", "mamba_ssm_state_size",
                    default=128)
    d_conv = r.int("mamba_d_conv", "conv_kernel", "mamba_conv_kernel", default=4)
    heads, head_dim = r.cfg.get("mamba_num_heads"), r.cfg.get("mamba_head_dim")
    if isinstance(heads, int) and isinstance(head_dim, int):
        d_inner = heads * head_dim
    else:
        d_inner = int(r.get("mamba_expand", "expand", default=2) * hidden)
    groups = r.int("mamba_n_groups", "n_groups", default=1)
    return d_inner * d_state * 4 + d_conv * (d_inner + 2 * groups * d_state) * dtype


def preset_from_hf(cfg: Mapping[str, Any], *, name: str, source: str = "config.json",
                   tensor_parallel: int = 1) -> tuple[dict[str, Any], list[str]]:
    """The model preset mapping for ``cfg`` (see the module docstring) and notes on what
    was approximated."""
    r = _Reader(_text_config(cfg), source)
    n = r.int("num_hidden_layers", "n_layer", "num_layers")
    hidden = r.int("hidden_size", "d_model")
    heads = r.int("num_attention_heads", "n_head")
    dtype = _dtype_bytes(r)
    kinds = layer_kinds(r, n)
    notes = []
    if r.cfg.get("kv_lora_rank"):  # MLA: one latent per token and layer (see docstring)
        width = r.int("kv_lora_rank") + r.int("qk_rope_head_dim", default=64)
        kv_heads, head_dim = 1, width / 2
        notes.append(f"MLA latent {width} values as 1 KV head of {width / 2:g}")
    else:
        kv_heads = r.int("num_key_value_heads", "num_kv_heads", default=heads)
        head_dim = r.int("head_dim", default=hidden // heads)
    if r.cfg.get("moe_intermediate_size") and r.cfg.get("num_experts_per_tok"):
        active = r.int("num_experts_per_tok") + _shared_experts(r)
        ffn = r.int("moe_intermediate_size") * active
        notes.append(f"MoE: FFN of {active} active experts")
    else:
        ffn = r.int("intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)
    window = r.cfg.get("sliding_window") or r.cfg.get("attention_chunk_size") or 4096
    mamba = _recurrent_state_bytes(r, hidden, dtype) if "mamba" in kinds else 0
    if head_dim != int(head_dim):
        raise HFConfigError(f"{source}: MLA latent width {2 * head_dim:g} is odd")
    preset = {
        "name": name, "num_layers": len(kinds), "num_heads": heads, "num_kv_heads": kv_heads,
        "head_dim": int(head_dim), "hidden_size": hidden, "ffn_size": ffn,
        "dtype_bytes": dtype, "tensor_parallel": tensor_parallel,
        "layers": kinds[0] if len(set(kinds)) == 1 else kinds,
        "sliding_window": int(window), "mamba_state_bytes": mamba,
    }
    if (moe := _moe(r, dtype)) is not None:
        preset["moe"] = moe
    if (comp := _compression(r, n, int(head_dim), dtype)) is not None:
        preset["compression"] = comp
        preset["attention_params"] = _low_rank_attention(r, hidden, heads, int(head_dim))
        notes.append("DeepSeek-V4 compressed KV: entries at the config's dtype (SGLang's "
                     "pools; vLLM's FP8 layout is 584 B per entry)")
    return preset, notes


def _shared_experts(r: _Reader) -> int:
    n = r.int("n_shared_experts", "num_shared_experts", default=0)
    width = r.int("shared_expert_intermediate_size", default=0)
    return n or width // max(1, r.int("moe_intermediate_size", default=1))


def _moe(r: _Reader, dtype: int) -> dict[str, Any] | None:
    """The preset's ``moe`` (which expert weights a batch reads), when the config routes."""
    experts = r.int("n_routed_experts", "num_experts", "num_local_experts", default=0)
    if not (experts and r.cfg.get("moe_intermediate_size") and r.cfg.get("num_experts_per_tok")):
        return None
    weight = {"fp4": 0.5, "fp8": 1.0}.get(str(r.cfg.get("expert_dtype", "")).lower(), dtype)
    return {"experts": experts, "top_k": r.int("num_experts_per_tok"),
            "shared": _shared_experts(r), "expert_ffn": r.int("moe_intermediate_size"),
            "expert_weight_bytes": float(weight)}


# SGLang's DeepSeek-V4 override of --swa-full-tokens-ratio: the window pool's share of the
# full pool's tokens (https://github.com/sgl-project/sglang/pull/37610)
DSV4_SWA_FULL_TOKENS_RATIO = 0.1


def _compression(r: _Reader, n: int, head_dim: int, dtype: int) -> dict[str, Any] | None:
    """DeepSeek-V4's ``compression`` from ``compress_ratios`` (one per layer; a trailing
    extra entry is the MTP layer's and is dropped)."""
    ratios = r.cfg.get("compress_ratios")
    if not isinstance(ratios, list):
        return None
    if len(ratios) < n or not all(isinstance(x, int) and x >= 0 for x in ratios):
        raise HFConfigError(f"{r.source}: 'compress_ratios' must hold {n} integers >= 0 "
                            f"(one per layer), got {ratios!r}")
    ratios = ratios[:n]
    topk = r.int("index_topk", default=0)
    compressed = sorted({x for x in ratios if x > 1})
    index_dim = r.int("index_head_dim", default=0)
    return {"ratios": ratios, "entry_bytes": head_dim * dtype,
            "index_ratio": compressed[0] if topk and compressed else 0, "index_topk": topk,
            "index_heads": r.int("index_n_heads", default=0), "index_head_dim": index_dim,
            "index_entry_bytes": index_dim * dtype,
            "swa_full_tokens_ratio": DSV4_SWA_FULL_TOKENS_RATIO}


def _low_rank_attention(r: _Reader, hidden: int, heads: int, head_dim: int) -> int:
    """Weights of DeepSeek-V4's attention projections: low-rank Q (``q_lora_rank``), one
    shared K/V projection, grouped low-rank O (``o_groups`` x ``o_lora_rank``); 0 when the
    config lacks them (the spec then derives them from heads)."""
    q, o, groups = (r.int(k, default=0) for k in ("q_lora_rank", "o_lora_rank", "o_groups"))
    if not (q and o and groups):
        return 0
    return hidden * q + q * heads * head_dim + hidden * head_dim + heads * head_dim * o \
        + groups * o * hidden
