"""Replicas: each has its own L1/L2; the router decides where a request goes."""

from __future__ import annotations

import pytest
from scheduler_scenarios import scenario

from sim.driver import simulate


def _two_replicas(router) -> dict:  # noqa: ANN001
    d = scenario(cache={"device_tokens": 100_000},
                 workload={"num_clients": 4, "num_rounds": 3, "max_parallel": 4})
    d["replicas"], d["router"] = 2, router
    return d


def _replicas_by_client(records: list[dict]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for r in records:
        out.setdefault(r["client"], set()).add(r["replica"])
    return out


def test_cache_aware_keeps_a_conversation_on_the_replica_that_holds_its_prefix() -> None:
    res = simulate(_two_replicas({"policy": "cache_aware", "cache_threshold": 0.3}))
    by_client = _replicas_by_client(res.records)
    assert all(len(reps) == 1 for reps in by_client.values()), by_client
    assert {r for reps in by_client.values() for r in reps} == {0, 1}  # both replicas used
    later = [r for r in res.records if r["round"] > 0]
    assert all(r["device_hit"] > 0 for r in later)


def test_round_robin_scatters_conversations_and_loses_their_cache() -> None:
    rr = simulate(_two_replicas("round_robin"))
    ca = simulate(_two_replicas("cache_aware"))
    assert any(len(reps) > 1 for reps in _replicas_by_client(rr.records).values())

    def hit(res) -> float:  # noqa: ANN001
        return sum(r["cached_tokens"] for r in res.records) / sum(
            r["prompt_tokens"] for r in res.records)

    assert hit(ca) > hit(rr)


def test_an_unknown_router_key_is_named() -> None:
    with pytest.raises(ValueError, match="router.cache_treshold"):
        simulate(_two_replicas({"policy": "cache_aware", "cache_treshold": 0.3}))
