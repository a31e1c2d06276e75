"""A queue head L1 cannot take, with nothing evictable but its own prefix, is refused
without the lock, the eviction walk and the unlock (KVCacheManager._refusal_certain,
Residency.device_refusal): the same decisions, records and timelines as the full
attempt, on small worlds of several eviction policies and seeds; and where something
else is evictable, the short cut must not apply (the full attempt evicts and admits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache.config import CacheConfig
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.plans import PlanBuilder
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef, Kind, PageRun, Tier
from hicache.runtime.interface import RuntimeInfo
from hicache.scenario import load_scenario
from hicache.tree.invariants import check_tree
from hicache.tree.radix import page_keys
from hicache.workload.request import Request
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4


def _run(sc, name: str) -> tuple:
    res = simulate(sc.with_overrides(["run.timeline_steps=true"]), name=name, progress=False)
    rows = [sorted(rep.timeline.as_tuples()) for rep in res.replicas]
    return res.decisions, res.records, res.sim_time, rows


@pytest.mark.parametrize(("variant", "sets"), [
    ("L1", ["seed=1"]),
    ("L1+L2", ["cache.radix_eviction_policy=lfu"]),
    ("L1+L2", ["cache.radix_eviction_policy=fifo", "seed=2"]),
    ("L1+L2+L3", []),
    ("L1+L2+L3", ["cache.enable_session_aware_eviction=true", "seed=3"]),
])
def test_certain_refusals_change_nothing(monkeypatch, variant, sets) -> None:
    sc = dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml",
                            ["workload.num_rounds=10", *sets]).expand())[variant]
    taken = []
    certain = KVCacheManager._refusal_certain

    def counting(self, need, end):  # noqa: ANN001, ANN202
        taken.append(certain(self, need, end))
        return taken[-1]

    monkeypatch.setattr(KVCacheManager, "_refusal_certain", counting)
    short = _run(sc, variant)
    assert sum(taken) > 0, "no refusal took the short cut: the test shows nothing"
    monkeypatch.setattr(KVCacheManager, "_refusal_certain", lambda self, need, end: False)
    assert _run(sc, variant) == short  # every refusal attempted in full


# -- a small manager: what the short cut must and must not answer -----------------------
def _manager() -> KVCacheManager:
    cache = CacheConfig(page_size=PAGE, device_tokens=16 * PAGE)
    return KVCacheManager(cache, RuntimeInfo("r", 0, PAGE, {Kind.FULL: 16}, {}),
                          PlanBuilder())


def _cached(kv: KVCacheManager, tokens: list[int], first: int) -> None:
    """The tree holds ``tokens`` on L1 from page ``first`` on (a finished request's)."""
    n = len(tokens) // PAGE
    ext = CacheExtentRef("r", 0, Tier.DEVICE, (PageRun(first, n),))
    kv.tree.insert(page_keys(tokens, PAGE), {Kind.FULL: ext})


def _request(rid: int, tokens: list[int], output: int) -> RequestState:
    return RequestState(Request(rid, 0.0, tokens, output), page_keys(tokens, PAGE))


def _live(kv: KVCacheManager) -> set[int]:
    return kv.tree.residency.device_heap.live()


def test_an_evictable_leaf_elsewhere_is_evicted_not_refused() -> None:
    kv = _manager()
    _cached(kv, list(range(8 * PAGE)), 0)  # 8 pages nobody holds: evictable
    kv.budget.own = 4  # a running request's pages
    st = _request(1, [9000 + i for i in range(2 * PAGE)], 6 * PAGE)  # needs 8, 4 free
    assert not kv._refusal_certain(8, None)  # a wrong "L1 is short" answer says True
    assert _live(kv)  # and changed nothing
    assert kv.admit(st)
    assert kv.tree.held_pages(Tier.DEVICE) < 8
    check_tree(kv.tree)


def test_only_its_own_prefix_evictable_refuses_as_the_full_attempt_does() -> None:
    kv, twin = _manager(), _manager()  # twin: every refusal attempted in full
    for m in (kv, twin):
        _cached(m, list(range(8 * PAGE)), 0)  # the head's own prefix, unlocked
        m.budget.own = 8  # 0 free
    twin._refusal_certain = lambda need, end: False
    tokens = list(range(8 * PAGE)) + [7000 + i for i in range(PAGE)]
    taken = []
    certain = kv._refusal_certain
    kv._refusal_certain = lambda need, end: taken.append(certain(need, end)) or taken[-1]
    a, b = _request(1, tokens, 2), _request(1, tokens, 2)
    assert not kv.admit(a) and not twin.admit(b)
    assert taken == [True]
    assert a.prefix_tokens == b.prefix_tokens == 0
    assert kv._refused is not None and twin._refused is not None
    assert kv.refusal_stands(a) and twin.refusal_stands(b)  # remembered alike
    (end,) = kv.tree.root.children.values()
    assert _live(kv) == _live(twin) == {end.id}  # the unlock's push of its prefix
    assert ([n.last_access for n in kv.tree.nodes.values()]
            == [n.last_access for n in twin.tree.nodes.values()])
    check_tree(kv.tree)
    check_tree(twin.tree)
    # its prefix locked by another request: the full attempt's unlock pushes nothing
    for m in (kv, twin):
        m._refused = None
        m.tree.lock(next(iter(m.tree.root.children.values())))
    assert not kv.admit(a) and not twin.admit(b)
    assert taken == [True, True]
    assert _live(kv) == _live(twin) == set()
