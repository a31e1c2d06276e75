"""L3 prefetch rules, one test per rule of docs/SOURCES.md §2."""

import pytest

from hicache.config import CacheConfig
from hicache.tiers.prefetch import (
    StopDecision,
    count_hits,
    prefetch_timeout,
    query_plan,
    should_query,
    stop_decision,
)

CFG = CacheConfig(page_size=64)  # prefetch_threshold 256, base 2 s, 0.1 s per Ki token, max 30 s


def test_l3_is_queried_only_from_prefetch_threshold_new_tokens():
    assert not should_query(255, CFG)
    assert should_query(256, CFG)


def test_l3_query_needs_at_least_one_full_page_even_with_a_lower_threshold():
    cfg = CacheConfig(page_size=64, hicache_storage_backend_extra_config={"prefetch_threshold": 8})
    assert not should_query(63, cfg)
    assert should_query(64, cfg)


def test_query_plan_uses_batches_of_128_pages():
    plan = query_plan(300)
    assert plan == [range(0, 128), range(128, 256), range(256, 300)]
    assert query_plan(0) == []
    assert query_plan(5, batch_pages=2) == [range(0, 2), range(2, 4), range(4, 5)]


def test_count_hits_counts_consecutive_hits_across_batches():
    assert count_hits([[True] * 128, [True, True, True]]) == 131


def test_count_hits_stops_at_the_first_miss():
    assert count_hits([[True, True, False, True], [True]]) == 2
    assert count_hits([[False, True]]) == 0


def test_count_hits_does_not_query_batches_after_a_miss():
    queried = []

    def batches():
        for i in range(3):
            queried.append(i)
            yield [True, False] if i == 1 else [True, True]

    assert count_hits(batches()) == 3
    assert queried == [0, 1]


def test_timeout_is_base_plus_per_ki_token():
    assert prefetch_timeout(0, CFG) == pytest.approx(2.0)
    assert prefetch_timeout(10 * 1024, CFG) == pytest.approx(3.0)


def test_timeout_is_capped_at_max():
    assert prefetch_timeout(1_000_000, CFG) == 30.0


def test_a_completed_prefetch_proceeds_under_every_policy():
    for policy in ("best_effort", "wait_complete", "timeout"):
        d = stop_decision(policy, now=0.0, arrival=0.0, completed=True, hit_tokens=4096, cfg=CFG)
        assert (d.proceed, d.reason) == (True, "complete")


def test_best_effort_policy_stops_now_with_what_arrived():
    d = stop_decision(
        "best_effort", now=0.01, arrival=0.0, completed=False, hit_tokens=1 << 20, cfg=CFG
    )
    assert d == StopDecision(True, "best_effort")


def test_wait_complete_policy_waits_however_long_it_takes():
    d = stop_decision(
        "wait_complete", now=1e6, arrival=0.0, completed=False, hit_tokens=64, cfg=CFG
    )
    assert (d.proceed, d.reason) == (False, "waiting")


def test_timeout_policy_stops_after_base_plus_per_ki_token():
    # 10 Ki hit tokens -> 2.0 + 0.1 * 10 = 3.0 s after arrival at t=5
    kw = dict(arrival=5.0, completed=False, hit_tokens=10 * 1024, cfg=CFG)
    before = stop_decision("timeout", now=7.99, **kw)
    at = stop_decision("timeout", now=8.0, **kw)
    assert (before.proceed, before.reason) == (False, "waiting")
    assert (at.proceed, at.reason) == (True, "timeout")
    assert at.deadline == pytest.approx(8.0)


def test_timeout_policy_is_counted_from_arrival_and_capped_at_max():
    kw = dict(arrival=100.0, completed=False, hit_tokens=10**7, cfg=CFG)
    assert not stop_decision("timeout", now=129.9, **kw).proceed
    assert stop_decision("timeout", now=130.0, **kw).proceed


def test_timeout_parameters_come_from_the_extra_config():
    cfg = CacheConfig.from_mapping(
        {"hicache_storage_backend_extra_config": '{"prefetch_timeout_base": 0.5}'}
    )
    kw = dict(arrival=0.0, completed=False, hit_tokens=0, cfg=cfg)
    assert stop_decision("timeout", now=0.5, **kw).proceed
    assert not stop_decision("timeout", now=0.49, **kw).proceed


def test_unknown_stop_policy_raises():
    with pytest.raises(ValueError, match="unknown prefetch policy"):
        stop_decision("eager", now=0, arrival=0, completed=False, hit_tokens=0, cfg=CFG)
