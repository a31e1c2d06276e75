"""Write policies: when L1 data is backed up to L2 (docs/SOURCES.md §2)."""

import pytest

from hicache.config import CacheConfig
from hicache.tiers.write_policy import (
    backup_threshold,
    eviction_needs_backup,
    should_backup_on_hit,
)


def test_write_through_backs_up_on_the_first_hit():
    assert backup_threshold("write_through") == 1
    assert not should_backup_on_hit("write_through", 0)
    assert should_backup_on_hit("write_through", 1)


def test_write_through_selective_backs_up_only_from_the_second_hit():
    assert backup_threshold("write_through_selective") == 2
    assert not should_backup_on_hit("write_through_selective", 1)
    assert should_backup_on_hit("write_through_selective", 2)
    assert should_backup_on_hit("write_through_selective", 7)


def test_write_back_never_backs_up_on_hits():
    assert backup_threshold("write_back") is None
    assert not any(should_backup_on_hit("write_back", n) for n in range(100))


def test_write_back_eviction_of_a_node_not_in_l2_backs_it_up_first():
    assert eviction_needs_backup("write_back", backed_up=False)
    assert not eviction_needs_backup("write_back", backed_up=True)


def test_write_through_eviction_deletes_without_backup():
    for policy in ("write_through", "write_through_selective"):
        assert not eviction_needs_backup(policy, backed_up=False)
        assert not eviction_needs_backup(policy, backed_up=True)


def test_config_threshold_agrees_with_the_policy_for_write_through_policies():
    for policy in ("write_through", "write_through_selective"):
        cfg = CacheConfig(hicache_write_policy=policy)
        assert cfg.write_through_threshold == backup_threshold(policy)


def test_unknown_write_policy_raises():
    with pytest.raises(ValueError, match="unknown write policy"):
        should_backup_on_hit("write_around", 1)
    with pytest.raises(ValueError, match="unknown write policy"):
        eviction_needs_backup("write_around", backed_up=False)
