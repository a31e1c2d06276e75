"""The router is pure policy over ReplicaViews: no scheduler, runtime or clock needed."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache.routing import Router, RouterConfig
from hicache.schema.adapters import SchemaErrors, validate
from hicache.workload.request import Request


@dataclass
class View:
    queued: int
    cached: int

    def load(self) -> int:
        return self.queued

    def match_tokens(self, request: Request) -> int:
        return self.cached


def req(n: int = 100) -> Request:
    return Request(rid=0, arrival=0.0, tokens=array("q", range(n)), output_len=1)


def test_round_robin_cycles_and_one_replica_always_gets_it():
    r = Router(RouterConfig(), [View(0, 0)] * 3)
    assert [r.route(req()) for _ in range(4)] == [0, 1, 2, 0]
    assert Router(RouterConfig(policy="cache_aware"), [View(9, 0)]).route(req()) == 0


def test_cache_aware_follows_the_longest_match_above_the_threshold():
    cfg = RouterConfig(policy="cache_aware", cache_threshold=0.5)
    assert Router(cfg, [View(0, 10), View(3, 60), View(1, 50)]).route(req()) == 1
    # below the threshold: the least loaded, ties to the lowest index
    assert Router(cfg, [View(2, 40), View(1, 49), View(1, 0)]).route(req()) == 1


def test_cache_aware_balances_first_when_loads_are_imbalanced():
    cfg = RouterConfig(policy="cache_aware", balance_abs_threshold=4,
                       balance_rel_threshold=1.5)
    views = [View(10, 100), View(2, 0)]
    assert Router(cfg, views).route(req()) == 1  # 10 - 2 > 4 and 10 > 2 * 1.5
    views = [View(5, 100), View(2, 0)]
    assert Router(cfg, views).route(req()) == 0  # 5 - 2 <= 4: the cache decides


def test_the_router_config_takes_a_name_or_a_mapping_and_names_bad_keys():
    assert validate(RouterConfig, "cache_aware").policy == "cache_aware"
    with pytest.raises(SchemaErrors, match="cache_treshold"):
        validate(RouterConfig, {"policy": "cache_aware", "cache_treshold": 0.3})
    with pytest.raises(SchemaErrors):
        validate(RouterConfig, {"cache_threshold": 1.5})
    with pytest.raises(ValueError, match="cache_threshold: expected a value <= 1.0"):
        RouterConfig(cache_threshold=1.5)  # built directly: checked without pydantic


def _reference_route(cfg: RouterConfig, views: list[View], prompt: int) -> int:
    """The cache-aware rule spelled out with (key, index) orders (the module doc)."""
    n = len(views)
    loads = [v.load() for v in views]
    least = min(range(n), key=lambda i: (loads[i], i))
    hi, lo = max(loads), min(loads)
    if hi - lo > cfg.balance_abs_threshold and hi > lo * cfg.balance_rel_threshold:
        return least
    matched = [v.match_tokens(req(prompt)) for v in views]
    best = max(range(n), key=lambda i: (matched[i], -loads[i], -i))
    return best if matched[best] / prompt >= cfg.cache_threshold else least


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 100)), min_size=2, max_size=6),
       st.integers(0, 8), st.sampled_from([0.0, 0.5, 1.0]))
def test_cache_aware_picks_as_the_spelled_out_rule_ties_included(pairs, abs_gap, threshold):
    # small loads and matches: many ties, where the first of equals must win
    cfg = RouterConfig(policy="cache_aware", cache_threshold=threshold,
                       balance_abs_threshold=abs_gap, balance_rel_threshold=1.5)
    views = [View(q, c) for q, c in pairs]
    assert Router(cfg, views).route(req(100)) == _reference_route(cfg, views, 100)
