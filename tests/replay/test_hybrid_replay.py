"""Hybrid replay: reuse is bounded by the strictest component at each boundary (seed 003)."""

from __future__ import annotations

from hicache.cli import main
from hicache.config import CacheConfig
from hicache.replay.engine import ReplayCache
from hicache.workload.request import Request

A = list(range(16))  # 4 pages of 4 tokens
EXTENDS_A = A + [100, 101, 102, 103]
SHARES_HALF_OF_A = A[:8] + [200, 201, 202, 203]


def hybrid(full_tokens: int, **components: int) -> ReplayCache:
    return ReplayCache(CacheConfig(page_size=4, device_tokens=full_tokens), **components)


def hits(cache: ReplayCache, *prompts: list[int]) -> list[int]:
    return [cache.process(Request(i, float(i), p, 1)).device_hit for i, p in enumerate(prompts)]


def test_mamba_reuses_only_where_a_checkpoint_was_left() -> None:
    c = hybrid(1000, mamba_slots=10)
    # A left a checkpoint at its end (16): a continuation reuses all of A; a prompt that
    # diverges at 8 finds no checkpoint there and recomputes everything
    assert hits(c, A, EXTENDS_A, SHARES_HALF_OF_A) == [0, 16, 0]


def test_full_only_would_reuse_the_shared_half() -> None:
    c = hybrid(1000, swa_window=1000)  # window > prompt
    assert hits(c, A, SHARES_HALF_OF_A) == [0, 8]


def test_swa_needs_a_live_window_ending_at_the_boundary() -> None:
    # window 4 tokens = 1 page: A keeps SWA only on its last page, so reuse at A's end works
    # but reuse at 8 meets a tombstone on page 2
    c = hybrid(1000, swa_window=4)
    assert hits(c, A, EXTENDS_A, SHARES_HALF_OF_A) == [0, 16, 0]


def test_hybrid_flags_refuse_tiers_they_do_not_model(tmp_path) -> None:  # noqa: ANN001
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival": 0, "tokens": [1, 2, 3, 4], "output_len": 1}\n')
    assert main(["replay", "--trace", str(trace), "--format", "tokens", "--mamba-slots", "4",
                 "--l3"]) == 2
