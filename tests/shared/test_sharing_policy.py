"""The sharing policies of one KV pool among schedulers (hicache.runtime.sharing)."""

from __future__ import annotations

import random

import pytest

from hicache.runtime.sharing import PoolLedger, SharingConfig, SharingPolicy

T = ("a", "b", "c")


def test_static_quotas_hold_whatever_the_others_use():
    p = SharingPolicy("static", 100, {"a": 50, "b": 30, "c": 20})
    for used in ({}, {"b": 30, "c": 20}, {"a": 50}):
        assert [p.limit(t, used, {}) for t in T] == [50, 30, 20]
    assert p.capacity("b") == 30
    with pytest.raises(ValueError, match="quotas .* more than the pool"):
        SharingPolicy("static", 100, {"a": 60, "b": 50})


def test_shared_pool_lends_free_pages_and_keeps_every_minimum():
    p = SharingPolicy("shared", 100, {"a": 20, "b": 20, "c": 10})
    assert p.capacity("a") == 70  # all but the others' minimums
    assert p.limit("a", {}, {}) == 70
    # b borrowed 40 beyond its minimum: a can still reach its own 20
    assert p.limit("a", {"b": 60}, {}) == 100 - 60 - 10 == 30
    assert p.limit("a", {"b": 70, "c": 10}, {}) == 20


def test_a_short_tenant_below_its_fair_share_makes_borrowers_give_back():
    p = SharingPolicy("shared", 100, {"a": 25, "b": 25})  # fair share 50 each
    used = {"a": 75, "b": 20}
    assert p.limit("a", used, {}) == 75  # nobody short: a keeps what it borrowed
    assert p.limit("a", used, {"b": 10}) == 65  # b short by 10: a gives 10 back
    assert p.limit("a", used, {"b": 50}) == 50  # ... but never below its fair share
    # both short: neither is pushed below its fair share
    both = {"a": 50, "b": 50}
    assert p.limit("a", both, {"a": 5, "b": 5}) == 50 == p.limit("b", both, {"a": 5, "b": 5})


def test_random_growth_never_overcommits_and_minimums_stay_reachable():
    rng = random.Random(1)
    p = SharingPolicy("shared", 1000, {"a": 100, "b": 300, "c": 50})
    used = dict.fromkeys(T, 0)
    short = dict.fromkeys(T, 0)
    for _ in range(5000):
        t = rng.choice(T)
        limit = p.limit(t, used, short)
        if rng.random() < 0.6:
            want = rng.randrange(1, 200)
            got = min(want, max(0, limit - used[t]))
            used[t] += got
            short[t] = want - got
        else:
            used[t] = max(0, min(used[t], limit) - rng.randrange(0, 150))  # evicts to fit
            short[t] = 0
        assert sum(max(p.share[u], used[u]) for u in T) <= p.total
        for u in T:  # every tenant can always grow to its minimum
            assert p.limit(u, used, short) >= p.share[u]


def test_config_splits_by_fraction_and_names_bad_input():
    cfg = SharingConfig("shared", (0.1, 0.3))
    pol = cfg.policy(1000, ["r0", "r1"])
    assert dict(pol.share) == {"r0": 100, "r1": 300}
    assert SharingConfig("static").policy(1000, ["r0", "r1"]).share == {"r0": 500, "r1": 500}
    with pytest.raises(ValueError, match="2 fractions for 3"):
        SharingConfig("shared", (0.1, 0.3)).policy(1000, ["r0", "r1", "r2"])
    with pytest.raises(ValueError, match="add up to more than 1"):
        SharingConfig("static", (0.6, 0.6)).policy(1000, ["r0", "r1"])


def test_the_ledger_counts_the_larger_of_accounted_and_placed():
    p = SharingPolicy("shared", 100, {"a": 10, "b": 10})
    placed = {"a": 0, "b": 60}  # b evicted (accounted 20) but its frees are not applied
    acc = {"a": 0, "b": 20}
    ledger = PoolLedger(p, placed.__getitem__)
    share_a = ledger.join("a", lambda: acc["a"])
    ledger.join("b", lambda: acc["b"])
    assert share_a.limit() == 40  # not 80: b's 60 pages are still placed
    placed["b"] = 20
    assert share_a.limit() == 80
