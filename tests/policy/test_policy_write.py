"""Write policies: when L1 data is backed up to L2 (docs/SOURCES.md §2). The cache
manager asks exactly these two questions (tests/kvcache checks it acts on them)."""

import pytest

from hicache.tiers.write_policy import WritePolicy, backup_threshold


def test_write_through_backs_up_on_the_first_hit():
    p = WritePolicy.named("write_through")
    assert backup_threshold("write_through") == p.threshold == 1
    assert not p.backup_on_hit(0)
    assert p.backup_on_hit(1)


def test_write_through_selective_backs_up_only_from_the_second_hit():
    p = WritePolicy.named("write_through_selective")
    assert p.threshold == 2
    assert not p.backup_on_hit(1)
    assert p.backup_on_hit(2) and p.backup_on_hit(7)


def test_write_back_never_backs_up_on_hits_only_on_eviction():
    p = WritePolicy.named("write_back")
    assert p.threshold is None
    assert not any(p.backup_on_hit(n) for n in range(100))
    assert p.backup_on_eviction


def test_write_through_eviction_deletes_without_backup():
    for policy in ("write_through", "write_through_selective"):
        assert not WritePolicy.named(policy).backup_on_eviction


def test_unknown_write_policy_raises():
    with pytest.raises(ValueError, match="unknown write policy"):
        WritePolicy.named("write_around")
