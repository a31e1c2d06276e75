"""Tier semantics end to end, and the L3 prefetch stop policies.

Hit rate by round (``hit_rate_by_round`` over ``requests_frame(result.records)``) is
``sum(cached) / sum(prompt)`` per multi-turn round. Adding a tier below may only add
places a prefix can be found, so on the same workload:

- L1+L2 >= L1 only, in every round;
- L1+L2+L3 >= L1+L2, in every round, on a workload whose working set (all clients'
  final contexts) exceeds L1+L2, so L3 is what keeps the evicted prefixes. The L3
  variant waits for its prefetches (``wait_complete``) so what L3 holds is used.

Prefetch stop policies (decision ``('prefetch_stop', rid, reason)``): ``best_effort``
admits a request without waiting for its prefetch (reason ``best_effort``);
``wait_complete`` admits only once the prefetch completed (reason ``complete`` only).
"""

from __future__ import annotations

import pytest
from scheduler_scenarios import L3_MOONCAKE, decisions, scenario

from hicache.report.frames import requests_frame
from hicache.report.metrics import hit_rate_by_round
from hicache.runtime.handles import Kind
from sim.driver import simulate

# 16 clients x 4 rounds x 1024 new tokens: final contexts ~4k tokens each, ~64k in all,
# against 8192 device + 16384 host tokens
WIDE = {"num_clients": 16, "num_rounds": 4, "request_length": 1024, "output_length": 8,
        "request_rate": 8}
SMALL_TIERS = {"device_tokens": 8192, "hicache_ratio": 2}
WAIT = {"hicache_storage_prefetch_policy": "wait_complete"}
BEST = {"hicache_storage_prefetch_policy": "best_effort"}


def _wide(**cache):  # noqa: ANN003, ANN202
    return simulate(scenario(workload=WIDE, cache={**SMALL_TIERS, **cache}))


@pytest.fixture(scope="module")
def runs():
    return {
        "L1": _wide(enable_hierarchical_cache=False),
        "L1+L2": _wide(),
        "L1+L2+L3": _wide(**L3_MOONCAKE, **WAIT),
        "L1+L2+L3 best_effort": _wide(**L3_MOONCAKE, **BEST),
    }


def by_round(result):  # noqa: ANN001, ANN201
    return hit_rate_by_round(requests_frame(result.records)).set_index("round")


def test_working_set_exceeds_l1_plus_l2(runs):
    rt = runs["L1+L2"].replicas[0].runtime
    capacity = (rt.device_sizes[Kind.FULL] + rt.host_sizes[Kind.FULL]) * rt.page_size
    final_context = {}
    for r in runs["L1+L2"].records:
        final_context[r["client"]] = max(final_context.get(r["client"], 0), r["prompt_tokens"])
    assert sum(final_context.values()) > 2 * capacity


def test_l2_hit_rate_at_least_l1_every_round(runs):
    l1, l2 = by_round(runs["L1"]), by_round(runs["L1+L2"])
    assert list(l1.index) == list(l2.index) == [0, 1, 2, 3]
    assert (l2["hit_rate"] >= l1["hit_rate"]).all(), (l1["hit_rate"], l2["hit_rate"])
    assert l2["host_hit"].sum() > 0  # the host tier served something
    assert (l1["host_hit"] == 0).all() and (l1["l3_hit"] == 0).all()


def test_l3_raises_the_hit_rate_overall_and_once_the_working_set_outgrows_l1_l2(runs):
    """Not "in every round": prefetches reserve L2 pages and protect the prefix they
    continue, so under a small L2 an L3 run can hit a little less in an early round
    (SGLang's prefetch takes host memory the same way). Summed over the run, and in the
    last round, where the conversations outgrew L1+L2, L3 must win."""
    l2, l3 = by_round(runs["L1+L2"]), by_round(runs["L1+L2+L3"])
    rate = lambda t: t["cached_tokens"].sum() / t["prompt_tokens"].sum()  # noqa: E731
    assert rate(l3) > rate(l2), (l2["hit_rate"], l3["hit_rate"])
    assert l3["hit_rate"].iloc[-1] > l2["hit_rate"].iloc[-1]
    assert l3["l3_hit"].sum() > 0  # L3 served prefixes L1+L2 had lost
    assert (l2["l3_hit"] == 0).all()


def _stop_reasons(result) -> set[str]:  # noqa: ANN001
    return {d[2] for d in decisions(result, "prefetch_stop")}


def test_best_effort_admits_without_waiting(runs):
    result = runs["L1+L2+L3 best_effort"]
    assert decisions(result, "prefetch")
    assert "best_effort" in _stop_reasons(result)


def test_wait_complete_admits_only_after_the_prefetch_completed(runs):
    result = runs["L1+L2+L3"]
    assert decisions(result, "prefetch")
    assert _stop_reasons(result) == {"complete"}
    # and the stop comes before the admission of the same request
    order = {}
    for i, d in enumerate(result.decisions):
        if d[1] in ("prefetch_stop", "admit"):
            order.setdefault((d[1], d[2]), i)
    for (kind, rid), i in order.items():
        if kind == "prefetch_stop":
            assert i < order[("admit", rid)]


# -- under device pressure (long outputs): a request can pass its prefetch stop and still
#    not fit on the device; it must not re-issue its prefetch every step (a regression:
#    an earlier scheduler issued 13079 prefetches for these 32 requests and lost its L2
#    hits to the host pages they reserved).
PRESSURE_L3 = {**L3_MOONCAKE, **BEST}


@pytest.fixture(scope="module")
def pressure():
    return {"L1+L2": simulate(scenario()), "L1+L2+L3": simulate(scenario(cache=PRESSURE_L3))}


def test_each_request_prefetches_at_most_once_under_device_pressure(pressure):
    per_request: dict[int, int] = {}
    for d in decisions(pressure["L1+L2+L3"], "prefetch"):
        per_request[d[1]] = per_request.get(d[1], 0) + 1
    assert per_request and max(per_request.values()) == 1, max(per_request.values())


# Why this holds, and once failed with Llama-3-8B's LM head: a best_effort prefetch keeps
# its reserved L2 pages until its L3 read returns, so an admission inside that window finds
# less L2 room; the round-1 scheduler left the request's own L2 prefix unprotected there,
# and making room deleted it (round 2 lost 1024 of one request's 2048 L2 tokens, only when
# the LM head's 0.36 ms per batch moved that admission into the window). The prefix lock
# taken when the prefetch starts (hicache/kvcache/prefetch.py, held until it completes)
# closes the window: with the LM head the runs agree exactly, and across L3 round trips of
# 0.1-10 ms and scheduler steps of 0.5-2x they did too (checked when vocab_size entered
# the presets).
def test_l3_does_not_lose_l2_hits_under_device_pressure(pressure):
    l2, l3 = by_round(pressure["L1+L2"]), by_round(pressure["L1+L2+L3"])
    assert (l3["hit_rate"] >= l2["hit_rate"]).all(), (l2["hit_rate"], l3["hit_rate"])
