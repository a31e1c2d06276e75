"""Attention work of a compressed-KV layer (DeepSeek-V4's CSA / HCA / window-only layers)
and the tensor-parallel all-reduce a layer waits for.

A new token at position p (1-based) of a layer with compression ratio r attends:

    window branch   min(p, W) uncompressed entries (W = sliding_window), layers with r != 1
    compressed      p / r entries (HCA: all of them; r = 1: every token; r = 0: none)
    indexed (CSA)   min(p / r, topk) entries, after the indexer scored all p / r of them
                    with index_heads x index_head_dim (2 FLOPs per multiply-add)

Sums over a prefill chunk of n new tokens after c cached ones use the closed forms below
(the entries seen are fractional: an average over positions). Bytes read per layer: the
window's and the attended entries' KV (``entry_bytes`` each) and the scored index keys.
Heads (attention and indexer) split over tensor-parallel ranks; entries are replicated.
"""

from __future__ import annotations

from collections.abc import Sequence

from hicache.model_parts import CompressedKV


def position_sum(n: int, c: int) -> float:
    """Sum of the positions c+1 .. c+n."""
    return n * c + n * (n + 1) / 2


def capped_sum(n: int, c: int, r: int, cap: int) -> float:
    """Sum over positions p = c+1 .. c+n of min(p / r, cap)."""
    if n <= 0:
        return 0.0
    edge = cap * r  # positions beyond this see cap entries
    below = max(0, min(c + n, edge) - c)  # positions c+1 .. c+below are under the cap
    return position_sum(below, c) / r + (n - below) * cap


def window_sum(n: int, c: int, w: int) -> float:
    """Sum over positions p = c+1 .. c+n of min(p, w)."""
    return capped_sum(n, c, 1, w)


def compressed_work(comp: CompressedKV, layer: int, window: int, tp: int,
                    prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
                    ) -> tuple[float, float, float]:
    """(attended pairs, indexer FLOPs, KV bytes read) of ``layer`` over a batch."""
    r = comp.ratios[layer]
    indexed = comp.indexed(layer)
    pairs = scored = read = 0.0
    chunks = list(prefills) + [(1, c) for c in decodes]
    for n, c in chunks:
        if r != 1:
            pairs += window_sum(n, c, window)
            read += min(c + n, window)
        if r == 0:
            continue
        if indexed:
            att = capped_sum(n, c, r, comp.index_topk)
            scored += position_sum(n, c) / r
            read += min((c + n) / r, comp.index_topk * n)  # selections, at most all entries
        else:
            att = position_sum(n, c) / r
            read += (c + n) / r
        pairs += att
    index_flops = 2.0 * comp.index_heads / tp * comp.index_head_dim * scored
    index_bytes = 0.0
    if indexed:
        index_bytes = comp.index_entry_bytes * sum((c + n) / r for n, c in chunks)
    return pairs, index_flops, read * comp.entry_bytes + index_bytes


def allreduce_time(nbytes: float, ranks: int, bus_bytes_per_s: float,
                   latency_s: float) -> float:
    """One ring all-reduce of ``nbytes`` over ``ranks`` GPUs: latency plus
    2 (ranks - 1) / ranks x bytes at the bus bandwidth (NCCL's busBw convention)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return latency_s + 2.0 * (ranks - 1) / ranks * nbytes / bus_bytes_per_s
