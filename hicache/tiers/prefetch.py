"""L3 (storage) prefetch decisions, as pure functions (docs/SOURCES.md §2).

Flow for one arriving request: :func:`should_query` (enough new tokens?) -> query the page-hash
chain in :func:`query_plan` batches -> :func:`count_hits` (consecutive hits, stop at the first
miss) -> fetch L3->L2 -> each time the scheduler reaches the waiting request,
:func:`stop_decision` says whether it proceeds with what has arrived or keeps waiting.
Nothing here reads a clock: ``now`` and ``arrival`` are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from hicache.config import PREFETCH_POLICIES, CacheConfig

StopReason = Literal["complete", "best_effort", "timeout", "waiting"]


def should_query(new_tokens_not_in_l1_l2: int, cfg: CacheConfig) -> bool:
    """Query L3 only for at least ``prefetch_threshold`` tokens and at least one full page
    beyond the L1/L2 match; below that the prefetch is revoked (docs/SOURCES.md §2, L3)."""
    return new_tokens_not_in_l1_l2 >= max(cfg.prefetch_threshold, cfg.page_size)


def query_plan(num_pages: int, batch_pages: int = 128) -> list[range]:
    """Page-index ranges of the L3 existence queries: consecutive batches of ``batch_pages``
    (the last one shorter) covering pages ``0 .. num_pages - 1`` (docs/SOURCES.md §2, L3)."""
    if num_pages < 0 or batch_pages < 1:
        raise ValueError(f"need num_pages >= 0 and batch_pages >= 1: {num_pages}, {batch_pages}")
    return [range(s, min(s + batch_pages, num_pages)) for s in range(0, num_pages, batch_pages)]


def count_hits(exists_per_batch: Iterable[Iterable[bool]]) -> int:
    """Consecutive leading hits over the batches in order; stops at the first miss without
    consuming later batches, so a lazy iterable skips the queries after a miss."""
    hits = 0
    for batch in exists_per_batch:
        for exists in batch:
            if not exists:
                return hits
            hits += 1
    return hits


def prefetch_timeout(hit_tokens: int, cfg: CacheConfig) -> float:
    """``min(max, base + per_ki_token * hit_tokens / 1024)`` seconds (docs/SOURCES.md §2,
    timeout)."""
    grown = cfg.prefetch_timeout_base + cfg.prefetch_timeout_per_ki_token * hit_tokens / 1024
    return min(cfg.prefetch_timeout_max, grown)


@dataclass(frozen=True, slots=True)
class StopDecision:
    """Whether a request waiting on its L3 prefetch proceeds now, and why.

    ``proceed`` is False only with reason ``waiting``; ``deadline`` is the absolute time at
    which a ``timeout`` policy gives up (None for the other policies).
    """

    proceed: bool
    reason: StopReason
    deadline: float | None = None


def stop_decision(
    policy: str,
    *,
    now: float,
    arrival: float,
    completed: bool,
    hit_tokens: int,
    cfg: CacheConfig,
) -> StopDecision:
    """Decide when the scheduler reaches the waiting request (docs/SOURCES.md §2, stop policy):
    complete -> proceed; ``best_effort`` -> stop now with what arrived; ``wait_complete`` ->
    wait; ``timeout`` -> stop once ``now - arrival >= prefetch_timeout(hit_tokens)``."""
    if policy not in PREFETCH_POLICIES:
        raise ValueError(f"unknown prefetch policy {policy!r}; allowed: {PREFETCH_POLICIES}")
    timeout = prefetch_timeout(hit_tokens, cfg)
    deadline = arrival + timeout if policy == "timeout" else None
    if completed:
        return StopDecision(True, "complete", deadline)
    if policy == "best_effort":
        return StopDecision(True, "best_effort", deadline)
    if policy == "timeout" and now - arrival >= timeout:
        return StopDecision(True, "timeout", deadline)
    return StopDecision(False, "waiting", deadline)
