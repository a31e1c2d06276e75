"""One model specification for both runtimes: layer shapes, per-layer kinds, KV bytes.

Invariant: a :class:`ModelSpec` is frozen and valid (a plain dataclass checked on
construction, :mod:`hicache.schema.plain`; presets are validated with pydantic): heads split
evenly over the tensor-parallel ranks (KV heads are replicated when there are fewer of
them than ranks, so ``tensor_parallel % num_kv_heads == 0`` then), and ``layers`` holds one
kind per layer. Byte counts are per rank: KV bytes per token per full/swa layer =
``2 (K and V) * kv_heads_per_rank * head_dim * dtype_bytes``; mamba layers hold no
per-token KV, only ``mamba_state_bytes`` of recurrent state per request (per rank).
Optional parts (:mod:`hicache.model_parts`): ``moe`` (which expert weights a batch reads)
and ``compression`` (DeepSeek-V4's compressed KV: per-layer bytes replace the formula).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from hicache.model_parts import CompressedKV, MoE
from hicache.presets import find_preset
from hicache.schema.adapters import SchemaErrors, validate
from hicache.schema.constraints import Parse
from hicache.schema.errors import InputError, format_errors
from hicache.schema.plain import Plain, to_plain
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
    # projection weights of one attention layer over all ranks (low-rank or grouped Q/O,
    # output gates); 0: 2 * hidden * (num_heads + num_kv_heads) * head_dim
    attention_params: NonNegInt = 0
    moe: MoE | None = None  # routed experts (hicache.model_parts)
    compression: CompressedKV | None = None  # compressed KV (hicache.model_parts)

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
        if self.moe is not None and self.moe.active_ffn != self.ffn_size:
            raise ValueError(f"ffn_size: {self.ffn_size} is not the active width of moe "
                             f"((top_k + shared) x expert_ffn = {self.moe.active_ffn})")
        c = self.compression
        if c is not None:
            if len(c.ratios) != self.num_layers:
                raise ValueError(f"compression.ratios: lists {len(c.ratios)} layers, "
                                 f"num_layers is {self.num_layers}")
            if any(k != "full" for k in layers):
                raise ValueError("compression: every layer must be 'full' (a layer with "
                                 "ratio 0 has only its sliding-window branch)")

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

    @property
    def layer_classes(self) -> tuple[tuple[str, int], ...]:
        """Per layer ``(kind, compression ratio)`` (ratio 1 without compression): layers of
        one class cost the same, so a cost model computes each class once."""
        c = self.compression
        return tuple((k, c.ratios[i] if c is not None else 1)
                     for i, k in enumerate(self.layers))

    def count(self, kind: str) -> int:
        return sum(1 for k in self.layers if k == kind)

    @property
    def windowed(self) -> bool:
        """Whether some layer keeps a sliding window beside its kept KV (a compressed
        model's window branch): the SWA component when components are tracked."""
        c = self.compression
        return c is not None and any(c.windowed(i) for i in range(self.num_layers))

    @property
    def component_kinds(self) -> tuple[str, ...]:
        """The layer kinds whose pools a tracked tree keeps: ``layer_kinds``, plus "swa"
        for a compressed model's windows (:mod:`hicache.model_parts`)."""
        return self.layers + (("swa",) if self.windowed else ())

    def swa_page_bytes(self, page_size: int) -> tuple[int, ...]:
        """Bytes of one SWA-pool page in each layer: the KV of "swa" layers, or a
        compressed model's uncompressed window entries."""
        c = self.compression
        if c is not None:
            return tuple(c.window_page_bytes(i, page_size) for i in range(self.num_layers))
        return self.layer_page_bytes(("swa",), page_size)

    def swa_pool_tokens(self, device_tokens: int) -> int:
        """The SWA pool's default size in tokens: the full pool's, times a compressed
        model's ``swa_full_tokens_ratio``."""
        c = self.compression
        return int(device_tokens * c.swa_full_tokens_ratio) if c is not None else device_tokens

    # ---- bytes ---------------------------------------------------------------------
    def kv_bytes_per_token_per_layer(self, kind: str, dtype_bytes: int | None = None) -> int:
        if kind not in KINDS:
            raise ValueError(f"unknown layer kind {kind!r}")
        if kind == "mamba":
            return 0
        b = self.dtype_bytes if dtype_bytes is None else dtype_bytes
        return 2 * self.kv_heads_per_rank * self.head_dim * b

    def layer_kv_page_bytes(self, layer: int, page_size: int) -> int:
        """Bytes one page of ``page_size`` tokens keeps in ``layer`` on one rank."""
        if self.compression is not None:
            return self.compression.page_bytes(layer, page_size)
        return page_size * self.kv_bytes_per_token_per_layer(self.layers[layer])

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """KV bytes per token over all attention layers on one rank (compressed layers:
        the average over a 1024-token span, rounded up)."""
        if self.compression is not None:
            span = 1024
            return -(-sum(self.compression.page_bytes(i, span)
                          for i in range(self.num_layers)) // span)
        return sum(self.kv_bytes_per_token_per_layer(k, dtype_bytes) for k in self.layers)

    def kv_bytes_per_page(self, page_size: int) -> dict[str, int]:
        """Bytes one page of ``page_size`` tokens holds, summed over the layers of each pool."""
        return {kind: sum(self.layer_kv_page_bytes(i, page_size)
                          for i, k in enumerate(self.layers) if k == kind)
                for kind in KV_KINDS}

    def mamba_state_bytes_per_request(self) -> int:
        return self.mamba_state_bytes * self.count("mamba")

    def layer_page_bytes(self, kinds: tuple[str, ...], page_size: int) -> tuple[int, ...]:
        """Bytes of one page in each layer, counting only layers whose kind is in ``kinds``
        (which layers a copy of a pool's page touches)."""
        return tuple(self.layer_kv_page_bytes(i, page_size) if k in kinds else 0
                     for i, k in enumerate(self.layers))

    def linear_params_per_layer(self, kind: str) -> float:
        """Weight parameters of one layer per rank: mixer projections plus the gated MLP.
        Attention: Q, K, V, O projections. Mamba: in_proj to 2*d_inner and out_proj with
        d_inner = 2 * hidden (Mamba-2 default expansion), i.e. 6 * hidden**2."""
        h = self.hidden_size
        return (self.mixer_params(kind) + 3.0 * h * self.ffn_size) / self.tensor_parallel

    def mixer_params(self, kind: str) -> float:
        """Weights of one layer's token mixer over all ranks (``attention_params`` when
        set for attention layers)."""
        h = self.hidden_size
        if kind == "mamba":
            return 6.0 * h * h
        if self.attention_params:
            return float(self.attention_params)
        return 2.0 * h * (self.num_heads + self.num_kv_heads) * self.head_dim

    def weight_bytes_per_layer(self, kind: str, tokens: int) -> float:
        """Weight bytes one rank reads for one layer of ``kind`` over ``tokens`` tokens: all
        dense weights, and with ``moe`` the shared experts plus the routed experts the
        tokens touch (:meth:`hicache.model_parts.MoE.touched`)."""
        if self.moe is None:
            return self.linear_params_per_layer(kind) * self.dtype_bytes
        m, h = self.moe, self.hidden_size
        per_expert = 3.0 * h * m.expert_ffn
        dense = self.mixer_params(kind) + m.shared * per_expert
        routed = m.touched(tokens) * per_expert * m.expert_weight_bytes
        return (dense * self.dtype_bytes + routed) / self.tensor_parallel

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
                "mamba_state_bytes": self.mamba_state_bytes, "vocab_size": self.vocab_size,
                **self._parts_mapping()}

    def _parts_mapping(self) -> dict[str, Any]:
        """The optional keys that are set (left out at their defaults, so plain presets'
        mappings, and the files written from them, stay as they were)."""
        out: dict[str, Any] = {}
        if self.attention_params:
            out["attention_params"] = self.attention_params
        if self.moe is not None:
            out["moe"] = to_plain(self.moe)
        if self.compression is not None:
            out["compression"] = {**to_plain(self.compression),
                                  "ratios": list(self.compression.ratios)}
        return out

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
