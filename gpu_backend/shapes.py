"""Model dimensions for the torch runtime, read from a model preset mapping.

Invariant: a :class:`ModelShape` is immutable and describes *one tensor-parallel rank*
through its ``*_per_rank`` properties; the KV bytes per token it reports follow the
shared schema ``2 * kv_heads/tp * head_dim * dtype_bytes`` per layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_KEYS = (
    "num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size", "ffn_size",
    "dtype_bytes", "tensor_parallel", "sliding_window", "vocab_size",
)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Dimensions of a decoder-only transformer (preset keys of ``scenarios/models``)."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    ffn_size: int
    dtype_bytes: int = 2
    tensor_parallel: int = 1
    layers: tuple[str, ...] = ()  # per-layer kind; () means all "full"
    sliding_window: int = 4096
    name: str = "unnamed"
    vocab_size: int = 0  # LM head rows per rank x tp; 0: no LM head (a preset without it)

    def __post_init__(self) -> None:
        tp = self.tensor_parallel
        if min(self.num_layers, self.num_heads, self.num_kv_heads, self.head_dim, tp) <= 0:
            raise ValueError(f"non-positive dimension in {self}")
        if self.num_heads % tp or (self.num_kv_heads % tp and self.num_kv_heads >= tp):
            raise ValueError(f"heads {self.num_heads}/{self.num_kv_heads} not divisible by tp {tp}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads (GQA)")
        if self.layers and len(self.layers) != self.num_layers:
            raise ValueError(f"{len(self.layers)} layer kinds for {self.num_layers} layers")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> ModelShape:
        """Build from a preset mapping; unknown keys (e.g. ``mamba_state_bytes``) are ignored."""
        kw: dict[str, Any] = {k: int(m[k]) for k in _KEYS if k in m}
        layers = m.get("layers", "full")
        if isinstance(layers, str):
            kw["layers"] = () if layers == "full" else (layers,) * int(m["num_layers"])
        else:
            kw["layers"] = tuple(str(x) for x in layers)
        kw["name"] = str(m.get("name", "unnamed"))
        return cls(**kw)

    def to_mapping(self) -> dict[str, Any]:
        """A model-preset mapping (shared schema) that describes this shape exactly and
        that :meth:`from_mapping` and ``sim.hardware.model.load_model`` accept."""
        return {
            "name": self.name, "num_layers": self.num_layers, "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
            "hidden_size": self.hidden_size, "ffn_size": self.ffn_size,
            "dtype_bytes": self.dtype_bytes, "tensor_parallel": self.tensor_parallel,
            "layers": list(self.layer_kinds), "sliding_window": self.sliding_window,
            "mamba_state_bytes": 0, "vocab_size": self.vocab_size,
        }

    @classmethod
    def tiny(cls) -> ModelShape:
        """A shape small enough for CPU tests."""
        return cls(num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
                   ffn_size=128, dtype_bytes=4, name="tiny", vocab_size=1024)

    @property
    def heads_per_rank(self) -> int:
        return self.num_heads // self.tensor_parallel

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads are replicated when there are fewer of them than ranks."""
        return max(1, self.num_kv_heads // self.tensor_parallel)

    @property
    def vocab_per_rank(self) -> int:
        """The LM head is split over tensor-parallel ranks (vocab-parallel)."""
        return -(-self.vocab_size // self.tensor_parallel)

    @property
    def ffn_per_rank(self) -> int:
        return max(1, self.ffn_size // self.tensor_parallel)

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        return self.layers or ("full",) * self.num_layers

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """KV bytes per token over all attention layers on one rank."""
        b = self.dtype_bytes if dtype_bytes is None else dtype_bytes
        attn = sum(1 for k in self.layer_kinds if k in ("full", "swa"))
        return 2 * attn * self.kv_heads_per_rank * self.head_dim * b
