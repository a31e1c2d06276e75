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
    if isinstance(r.cfg.get("layer_types"), list):
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
        active = r.int("num_experts_per_tok") + r.int("n_shared_experts",
                                                      "num_shared_experts", default=0)
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
    return preset, notes
