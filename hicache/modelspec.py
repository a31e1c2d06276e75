"""One model specification for both runtimes: layer shapes, per-layer kinds, KV bytes.

Invariant: a :class:`ModelSpec` is frozen and valid (a plain dataclass checked on
construction, :mod:`hicache.schema.plain`; presets are validated with pydantic): heads split
evenly over the tensor-parallel ranks (KV heads are replicated when there are fewer of
them than ranks, so ``tensor_parallel % num_kv_heads == 0`` then), and ``layers`` holds one
kind per layer. Byte counts are per rank: KV bytes per token per full/swa layer =
``2 (K and V) * kv_heads_per_rank * head_dim * dtype_bytes``; mamba layers hold no
per-token KV, only ``mamba_state_bytes`` of recurrent state per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from hicache.presets import find_preset
from hicache.schema.adapters import SchemaErrors, validate
from hicache.schema.constraints import Parse
from hicache.schema.errors import InputError, format_errors
from hicache.schema.plain import Plain
from hicache.schema.types import NonEmptyStr, NonNegInt, PosInt, int_
from hicache.schema.yamlio import read_yaml

KINDS = ("full", "swa", "mamba")
KV_KINDS = ("full", "swa")
Kind = Literal["full", "swa", "mamba"]


def _kinds(v: Any) -> Any:
    return (v,) if isinstance(v, str) else v  # "full" -> one kind for every layer


@dataclass(frozen=True, kw_only=True)
class ModelSpec(Plain):
    """A decoder-only model as a model preset describes it (``scenarios/models/*.yaml``)."""

    name: NonEmptyStr = "unnamed"
    num_layers: int_(ge=1, le=100_000)
    num_heads: int_(ge=1, le=1 << 20)
    num_kv_heads: int_(ge=1, le=1 << 20)
    head_dim: int_(ge=1, le=1 << 20)
    hidden_size: int_(ge=1, le=1 << 30)
    ffn_size: int_(ge=1, le=1 << 30)
    dtype_bytes: int_(ge=1, le=8) = 2
    tensor_parallel: int_(ge=1, le=1 << 16) = 1
    # one kind per layer, or one kind for all ("full"); () means all full
    layers: Annotated[tuple[Kind, ...], Parse(_kinds)] = ()
    sliding_window: PosInt = 4096  # tokens seen by each swa layer
    mamba_state_bytes: NonNegInt = 0  # recurrent state per mamba layer per request
    vocab_size: NonNegInt = 0  # the LM head's width (split over tp ranks); 0: no LM head

    __pydantic_config__ = {"extra": "forbid", "validate_default": True}

    def __post_init__(self) -> None:
        super().__post_init__()
        tp, kv = self.tensor_parallel, self.num_kv_heads
        if self.num_heads % tp:
            raise ValueError(f"num_heads: {self.num_heads} does not split over "
                             f"tensor_parallel {tp}")
        if (kv % tp) if kv >= tp else (tp % kv):
            raise ValueError(f"num_kv_heads: {kv} neither splits over nor replicates evenly "
                             f"onto tensor_parallel {tp}")
        if self.num_heads % kv:
            raise ValueError(f"num_heads: {self.num_heads} is not a multiple of num_kv_heads "
                             f"{kv} (GQA)")
        layers = self.layers or ("full",)
        if len(layers) == 1:
            layers = layers * self.num_layers
        if len(layers) != self.num_layers:
            raise ValueError(f"layers: lists {len(layers)} layers, num_layers is "
                             f"{self.num_layers}")
        object.__setattr__(self, "layers", tuple(layers))

    # ---- per rank ------------------------------------------------------------------
    @property
    def heads_per_rank(self) -> int:
        return self.num_heads // self.tensor_parallel

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads are split across ranks, replicated when there are fewer than ranks."""
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
        return self.layers

    def count(self, kind: str) -> int:
        return sum(1 for k in self.layers if k == kind)

    # ---- bytes ---------------------------------------------------------------------
    def kv_bytes_per_token_per_layer(self, kind: str, dtype_bytes: int | None = None) -> int:
        if kind not in KINDS:
            raise ValueError(f"unknown layer kind {kind!r}")
        if kind == "mamba":
            return 0
        b = self.dtype_bytes if dtype_bytes is None else dtype_bytes
        return 2 * self.kv_heads_per_rank * self.head_dim * b

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """KV bytes per token over all attention layers on one rank."""
        return sum(self.kv_bytes_per_token_per_layer(k, dtype_bytes) for k in self.layers)

    def kv_bytes_per_page(self, page_size: int) -> dict[str, int]:
        """Bytes one page of ``page_size`` tokens holds, summed over the layers of each pool."""
        return {kind: page_size * self.kv_bytes_per_token_per_layer(kind) * self.count(kind)
                for kind in KV_KINDS}

    def mamba_state_bytes_per_request(self) -> int:
        return self.mamba_state_bytes * self.count("mamba")

    def layer_page_bytes(self, kinds: tuple[str, ...], page_size: int) -> tuple[int, ...]:
        """Bytes of one page in each layer, counting only layers whose kind is in ``kinds``
        (which layers a copy of a pool's page touches)."""
        return tuple(page_size * self.kv_bytes_per_token_per_layer(k) if k in kinds else 0
                     for k in self.layers)

    def linear_params_per_layer(self, kind: str) -> float:
        """Weight parameters of one layer per rank: mixer projections plus the gated MLP.
        Attention: Q, K, V, O projections. Mamba: in_proj to 2*d_inner and out_proj with
        d_inner = 2 * hidden (Mamba-2 default expansion), i.e. 6 * hidden**2."""
        h = self.hidden_size
        if kind == "mamba":
            mixer = 6.0 * h * h
        else:
            mixer = 2.0 * h * self.num_heads * self.head_dim + \
                2.0 * h * self.num_kv_heads * self.head_dim
        return (mixer + 3.0 * h * self.ffn_size) / self.tensor_parallel

    # ---- mappings ------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, m: Mapping[str, Any], *, source: str = "<model>",
                     lines: Mapping[tuple, int] | None = None,
                     prefix: tuple = ()) -> ModelSpec:
        """Validate a preset mapping with pydantic; an :class:`InputError` names ``source``,
        line and key."""
        if not isinstance(m, Mapping):
            raise InputError(f"{source}: {'.'.join(map(str, prefix)) or 'model'}: expected a "
                             f"mapping of model keys, got {type(m).__name__}")
        try:
            return validate(cls, {str(k): v for k, v in m.items()})
        except SchemaErrors as e:
            raise InputError("\n".join(format_errors(e, source=source, root=cls,
                                                     lines=lines, prefix=prefix))) from None

    def to_mapping(self) -> dict[str, Any]:
        """The preset mapping that describes this spec exactly (round-trips)."""
        return {"name": self.name, "num_layers": self.num_layers, "num_heads": self.num_heads,
                "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "hidden_size": self.hidden_size, "ffn_size": self.ffn_size,
                "dtype_bytes": self.dtype_bytes, "tensor_parallel": self.tensor_parallel,
                "layers": list(self.layers), "sliding_window": self.sliding_window,
                "mamba_state_bytes": self.mamba_state_bytes, "vocab_size": self.vocab_size}

    @classmethod
    def tiny(cls) -> ModelSpec:
        """A shape small enough for CPU tests."""
        return cls(num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
                   ffn_size=128, dtype_bytes=4, name="tiny", vocab_size=1024)


DEFAULT_MODEL = "llama-3-8b"


def load_model_spec(ref: str | Path | Mapping[str, Any] | ModelSpec, *,
                    base: Path | None = None) -> ModelSpec:
    """A spec from a preset name (``scenarios/models/NAME.yaml``), a path (relative to
    ``base``) or a mapping."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, Mapping):
        return ModelSpec.from_mapping(ref)
    doc = read_yaml(find_preset("models", ref, base=base))
    return ModelSpec.from_mapping(doc.data, source=doc.source, lines=doc.lines)
