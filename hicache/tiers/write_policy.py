"""When L1 (device) data is backed up to L2 (host): SGLang's three write policies.

    write_through            back a node up on its 1st hit (prompt nodes right after
                             prefill, output nodes when the request finishes)
    write_through_selective  back up on the 2nd hit (only hot data)
    write_back               back up only when L1 evicts the node; eviction waits for it

With an L3 attached, every completed L2 copy is then written to L3 (pages L3 already has
are skipped), whichever policy made it (docs/SOURCES.md §2; SGLang 0.5.23 calls
``write_backup_storage`` when any device-to-host copy is acknowledged).
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """One write policy's two questions, asked by the cache manager."""

    name: str
    threshold: int | None  # hits that trigger a backup; None: never on hit

    @classmethod
    def named(cls, policy: str) -> WritePolicy:
        return cls(policy, backup_threshold(policy))

    def backup_on_hit(self, hit_count: int) -> bool:
        """Back a node up now that it has ``hit_count`` hits?"""
        return self.threshold is not None and hit_count >= self.threshold

    @property
    def backup_on_eviction(self) -> bool:
        """Does L1 eviction of a node with no L2 copy back it up first (else delete it)?"""
        return self.threshold is None
