"""Optional parts of a :class:`hicache.modelspec.ModelSpec`: routed experts and compressed KV.

A plain decoder needs neither. The seed's models do (``scenarios/models/*.yaml``):

- :class:`MoE` says which FFN *weights* a batch reads. The FLOPs stay those of the active
  width (``ModelSpec.ffn_size = (top_k + shared) * expert_ffn``, checked), but a batch of
  T tokens touches ``E * (1 - (1 - k/E)**T)`` distinct routed experts in expectation
  (tokens route independently and uniformly: an approximation; real routers are skewed),
  which is what a memory-bound decode step pays for.
- :class:`CompressedKV` says which KV each layer keeps per token. DeepSeek-V4's attention
  (hybrid CSA/HCA): one vector per kept entry serves as K and V (MQA, one head of
  ``ModelSpec.head_dim``, replicated on every TP rank); layer i keeps one entry per
  ``ratios[i]`` tokens (1: every token, plain attention; 0: none, the layer has only its
  sliding-window branch); every layer whose ratio is not 1 also attends the last
  ``sliding_window`` tokens uncompressed (one ``entry_bytes`` entry per token). Page
  bytes count only the kept entries::

      per token, layer i:  entry_bytes / ratios[i]  (+ index_entry_bytes / ratios[i]
                           when ratios[i] == index_ratio: the lightning indexer's keys)

  Layers whose ratio is ``index_ratio`` are sparse (CSA): each query scores all their
  entries with ``index_heads x index_head_dim`` and attends the ``index_topk`` best; the
  other compressed layers (HCA) attend all their entries.

  The window: without ``scheduler.track_components`` it is per-request state (never
  cached). With it, it is the tree's SWA component in its own L1 pool, as SGLang's unified
  radix tree keeps DeepSeek-V4's SWA KV (https://github.com/sgl-project/sglang/issues/23639):
  a page's window bytes are ``entry_bytes`` per token in every windowed layer
  (:meth:`CompressedKV.window_page_bytes`), and the pool holds ``swa_full_tokens_ratio``
  of the full pool's tokens (SGLang's DeepSeek-V4 override: 0.1,
  https://github.com/sgl-project/sglang/pull/37610) unless ``run.swa_tokens`` says.

  The same form states a
  sliding-window model whose local layers' KV stays out of the tiers (ratio 0 for them,
  1 for the global layers, ``entry_bytes`` = K and V of one layer's heads on a rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from hicache.schema.constraints import Parse
from hicache.schema.plain import Plain
from hicache.schema.types import NonNegInt, PosInt, float_, int_


@dataclass(frozen=True, kw_only=True)
class MoE(Plain):
    """Routed experts of every layer's FFN (see the module docstring)."""

    experts: PosInt  # routed experts per layer
    top_k: PosInt  # routed experts per token
    shared: NonNegInt = 0  # shared experts, always active
    expert_ffn: PosInt  # intermediate width of one expert
    expert_weight_bytes: float_(gt=0.0, le=8.0) = 1.0  # per routed-expert weight (FP4: 0.5)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_k > self.experts:
            raise ValueError(f"top_k: {self.top_k} exceeds experts {self.experts}")

    @property
    def active_ffn(self) -> int:
        return (self.top_k + self.shared) * self.expert_ffn

    def touched(self, tokens: int) -> float:
        """Expected distinct routed experts ``tokens`` tokens select (uniform routing)."""
        if tokens <= 0:
            return 0.0
        return self.experts * (1.0 - (1.0 - self.top_k / self.experts) ** tokens)


def _ratios(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


@dataclass(frozen=True, kw_only=True)
class CompressedKV(Plain):
    """DeepSeek-V4-style compressed attention (see the module docstring)."""

    ratios: Annotated[tuple[int_(ge=0, le=1 << 20), ...], Parse(_ratios)]  # one per layer
    entry_bytes: PosInt  # one kept entry of one layer, as stored
    index_ratio: NonNegInt = 0  # layers with this ratio carry the indexer (0: none)
    index_topk: NonNegInt = 0  # entries each query attends in indexed layers
    index_heads: NonNegInt = 0
    index_head_dim: NonNegInt = 0
    index_entry_bytes: NonNegInt = 0  # indexer key of one entry, as stored
    # SWA pool tokens per full-pool token when the window is tracked (SGLang's
    # --swa-full-tokens-ratio; its DeepSeek-V4 default is 0.1)
    swa_full_tokens_ratio: float_(gt=0.0, le=1.0) = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.ratios:
            raise ValueError("ratios: needs one ratio per layer")
        if self.index_ratio and self.index_ratio not in self.ratios:
            raise ValueError(f"index_ratio: no layer has ratio {self.index_ratio}")
        if self.index_ratio and not (self.index_topk and self.index_heads
                                     and self.index_head_dim):
            raise ValueError("index_ratio: needs index_topk, index_heads and index_head_dim")

    def indexed(self, layer: int) -> bool:
        return bool(self.index_ratio) and self.ratios[layer] == self.index_ratio

    def page_bytes(self, layer: int, page_size: int) -> int:
        """Bytes ``page_size`` tokens keep in ``layer`` (entries per page may be a
        fraction: the average over pages)."""
        r = self.ratios[layer]
        if r == 0:
            return 0
        per_entry = self.entry_bytes + (self.index_entry_bytes if self.indexed(layer) else 0)
        return page_size * per_entry // r

    def windowed(self, layer: int) -> bool:
        """Whether ``layer`` has a sliding-window branch (every layer not plain, ratio 1)."""
        return self.ratios[layer] != 1

    def window_page_bytes(self, layer: int, page_size: int) -> int:
        """Bytes of ``page_size`` tokens' uncompressed window entries in ``layer``."""
        return page_size * self.entry_bytes if self.windowed(layer) else 0

    def entries(self, layer: int, tokens: int) -> float:
        """Entries ``layer`` keeps for a context of ``tokens`` tokens."""
        r = self.ratios[layer]
        return tokens / r if r else 0.0
