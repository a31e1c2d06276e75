"""When L1 (device) data is backed up to L2 (host): the three SGLang write policies.

Each rule is docs/SOURCES.md §2, "Write policies"; the tree asks these functions and emits
the backup actions itself. A node being written stays locked until its copy completes.
"""

from __future__ import annotations

from hicache.config import WRITE_POLICIES

_THRESHOLDS: dict[str, int | None] = {
    "write_through": 1,
    "write_through_selective": 2,
    "write_back": None,
}


def _check(policy: str) -> None:
    if policy not in WRITE_POLICIES:
        raise ValueError(f"unknown write policy {policy!r}; allowed: {', '.join(WRITE_POLICIES)}")


def backup_threshold(policy: str) -> int | None:
    """Hits that trigger backup: write_through 1, selective 2, write_back None
    (docs/SOURCES.md §2)."""
    _check(policy)
    return _THRESHOLDS[policy]


def should_backup_on_hit(policy: str, hit_count: int) -> bool:
    """Back up once a node's hit count reaches the policy threshold; never for write_back."""
    threshold = backup_threshold(policy)
    return threshold is not None and hit_count >= threshold


def eviction_needs_backup(policy: str, backed_up: bool) -> bool:
    """Under write_back, L1 eviction of a node not yet in L2 first backs it up (docs/SOURCES.md §2);
    under write-through policies an un-backed-up node is simply deleted."""
    _check(policy)
    return policy == "write_back" and not backed_up
