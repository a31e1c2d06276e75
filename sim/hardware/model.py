"""Model preset: layer shapes, per-layer kinds and the KV / state bytes they imply.

Invariant: byte counts are per tensor-parallel rank. KV bytes per token per full/swa layer =
2 (K and V) * kv_heads_per_rank * head_dim * dtype_bytes; mamba layers hold no per-token
KV, only ``mamba_state_bytes`` of recurrent state per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.hardware.loader import Section, resolve

KINDS = ("full", "swa", "mamba")
KV_KINDS = ("full", "swa")


@dataclass(frozen=True, slots=True)
class ModelPreset:
    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    ffn_size: int
    dtype_bytes: int
    tensor_parallel: int
    layer_kinds: tuple[str, ...]
    sliding_window: int
    mamba_state_bytes: int
    source: str = "<mapping>"
    vocab_size: int = 0  # the LM head's width (split over tp ranks); 0: no LM head modelled

    @property
    def heads_per_rank(self) -> float:
        return self.num_heads / self.tensor_parallel

    @property
    def kv_heads_per_rank(self) -> float:
        """KV heads are split across ranks, replicated when there are fewer than ranks."""
        return max(1.0, self.num_kv_heads / self.tensor_parallel)

    def count(self, kind: str) -> int:
        return sum(1 for k in self.layer_kinds if k == kind)

    def kv_bytes_per_token_per_layer(self, kind: str) -> int:
        if kind not in KINDS:
            raise ValueError(f"unknown layer kind {kind!r}")
        if kind == "mamba":
            return 0
        return int(2 * self.kv_heads_per_rank * self.head_dim * self.dtype_bytes)

    def kv_bytes_per_token(self) -> int:
        return sum(self.kv_bytes_per_token_per_layer(k) for k in self.layer_kinds)

    def kv_bytes_per_page(self, page_size: int) -> dict[str, int]:
        """Bytes one page of ``page_size`` tokens holds, summed over the layers of each pool."""
        return {
            kind: page_size * self.kv_bytes_per_token_per_layer(kind) * self.count(kind)
            for kind in KV_KINDS
        }

    def mamba_state_bytes_per_request(self) -> int:
        return self.mamba_state_bytes * self.count("mamba")

    def layer_page_bytes(self, kinds: tuple[str, ...], page_size: int) -> tuple[int, ...]:
        """Bytes of one page in each layer, counting only layers whose kind is in ``kinds``
        (which layers a copy of a pool's page touches)."""
        return tuple(
            page_size * self.kv_bytes_per_token_per_layer(k) if k in kinds else 0
            for k in self.layer_kinds
        )

    def linear_params_per_layer(self, kind: str) -> float:
        """Weight parameters of one layer per rank: mixer projections plus the gated MLP.
        Attention: Q, K, V, O projections. Mamba: in_proj to 2*d_inner and out_proj with
        d_inner = 2 * hidden (Mamba-2 default expansion), i.e. 6 * hidden**2."""
        h = self.hidden_size
        if kind == "mamba":
            mixer = 6.0 * h * h
        else:
            q_o = 2.0 * h * self.num_heads * self.head_dim
            kv = 2.0 * h * self.num_kv_heads * self.head_dim
            mixer = q_o + kv
        mlp = 3.0 * h * self.ffn_size
        return (mixer + mlp) / self.tensor_parallel


def _layers(top: Section, num_layers: int) -> tuple[str, ...]:
    raw = top.raw("layers", "full")
    kinds = (raw,) * num_layers if isinstance(raw, str) else tuple(raw)
    if len(kinds) != num_layers:
        raise ValueError(f"{top.origin}: key 'layers' lists {len(kinds)} layers, "
                         f"num_layers is {num_layers}")
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"{top.origin}: key 'layers' has unknown kind {k!r} (use {KINDS})")
    return kinds


def load_model(source: str | Path | Mapping[str, Any]) -> ModelPreset:
    """Load a preset from a name (``scenarios/models/NAME.yaml``), a path or a mapping."""
    data, origin = resolve(source, "models")
    top = Section(data, origin)
    num_layers = top.int("num_layers", positive=True)
    kinds = _layers(top, num_layers)
    return ModelPreset(
        name=top.str("name"),
        num_layers=num_layers,
        num_heads=top.int("num_heads", positive=True),
        num_kv_heads=top.int("num_kv_heads", positive=True),
        head_dim=top.int("head_dim", positive=True),
        hidden_size=top.int("hidden_size", positive=True),
        ffn_size=top.int("ffn_size", positive=True),
        dtype_bytes=top.int("dtype_bytes", positive=True),
        tensor_parallel=top.int("tensor_parallel", 1, positive=True),
        layer_kinds=kinds,
        sliding_window=top.int("sliding_window", 4096, positive=True),
        mamba_state_bytes=top.int("mamba_state_bytes", 0),
        source=origin,
        vocab_size=top.int("vocab_size", 0),
    )
