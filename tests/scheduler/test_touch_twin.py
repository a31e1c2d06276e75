"""Twin runs: ``Residency.touched`` skipping locked leaves (tests/tree/test_touch_locked.py)
against the touch that pushes every touched leaf, on small worlds that evict all the time,
several tier setups and seeds: records, decisions and timelines must be the same.
"""

from __future__ import annotations

import pytest
from scheduler_scenarios import L1_ONLY, L2_VARIANTS, L3_MOONCAKE, scenario

from hicache.tree.eviction import LazyHeap
from hicache.tree.node import Node
from hicache.tree.residency import Residency
from sim.driver import simulate


def _always_push(self: Residency, node: Node) -> None:
    """The touch before the shortcut: every touched leaf gets a fresh entry."""
    node.stamp += 1
    self.tree.changes += 1
    if node.on_device:
        if node.is_device_leaf():
            self.device_heap.push(node)
    elif node.on_host and not node.children:
        self.host_heap.push(node)


TWINS = {
    "L1": L1_ONLY,
    **L2_VARIANTS,
    "L1+L2+L3": L3_MOONCAKE,
    "L1+L2 lfu": {"radix_eviction_policy": "lfu"},
}


def _outcome(result) -> tuple:  # noqa: ANN001
    return (result.records, result.decisions,
            [rep.timeline.as_tuples() for rep in result.replicas], result.sim_time)


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("cache", list(TWINS.values()), ids=list(TWINS))
def test_the_same_run_as_a_touch_that_always_pushes(cache: dict, seed: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    small = {**cache, "device_tokens": 4096}  # 64 pages: evictions all the time
    sc = scenario(cache=small, seed=seed, workload={"num_clients": 6, "num_rounds": 3})
    pushes = {"n": 0}
    push = LazyHeap.push

    def counted(self: LazyHeap, node: Node) -> None:
        pushes["n"] += 1
        push(self, node)

    monkeypatch.setattr(LazyHeap, "push", counted)
    ours = simulate(sc)
    ours_pushed, pushes["n"] = pushes["n"], 0
    monkeypatch.setattr(Residency, "touched", _always_push)
    monkeypatch.setattr(Residency, "added", _always_push)
    monkeypatch.setattr(Residency, "unlocked", _always_push)
    twin = simulate(sc)
    assert any(d[1] == "evict" for d in ours.decisions)  # the heaps were used
    assert ours_pushed <= pushes["n"]
    if cache is not L1_ONLY and seed == 11:  # these worlds touch locked leaves
        assert ours_pushed < pushes["n"]  # the shortcut applied
    assert _outcome(ours) == _outcome(twin)


def test_the_twin_touch_tells_a_wrong_order_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin comparison sees heap order: a touch that pushes nothing changes the run."""
    sc = scenario(cache={"device_tokens": 4096}, seed=3,
                  workload={"num_clients": 6, "num_rounds": 3})
    ours = simulate(sc)

    def never(self: Residency, node: Node) -> None:
        node.stamp += 1
        self.tree.changes += 1

    for name in ("touched", "added", "unlocked"):
        monkeypatch.setattr(Residency, name, never)
    try:
        broken = simulate(sc)
    except Exception:  # noqa: BLE001 - a stall or a refused plan is a difference too
        return
    assert _outcome(broken) != _outcome(ours)
