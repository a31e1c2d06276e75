"""``cache.session_coverage``: what a live session protects from SWA and MAMBA eviction.
``path`` (ours, the default): every node on its path; ``component`` (SGLang, PR 29173):
the window + one page before its frontier for SWA, the frontier alone for MAMBA, so the
older windows and states of a live session go before another session's frontier window."""

from __future__ import annotations

import pytest
from tree_harness import Harness

from hicache.config import CacheConfig, ConfigError
from hicache.tree.actions import Deleted
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.session_coverage import covered


def two_sessions(coverage: str) -> tuple[Harness, dict]:
    """S2 holds one old page ``b``; S1 the path a1 - a2 - a3 (frontier a3), a2 and a3
    recently matched, a1 older than them but newer than ``b``. Window 4 tokens = 1 page."""
    h = Harness(TreeSpec.hybrid(4, swa_window=4, mamba=True), session_aware=True)
    h.tree.residency.component_coverage = coverage == "component"
    b = h.insert(h.pages([4])).node
    p = h.pages([1, 2, 3])
    for i in (1, 2, 3):
        h.insert(p[:i])
    a1 = h.tree.root.children[p[0]]
    a2 = a1.children[p[1]]
    a3 = a2.children[p[2]]
    h.tree.reference_session("S1", a3)
    h.tree.reference_session("S2", b)
    h.tree.match(p)
    return h, {"a1": a1, "a2": a2, "a3": a3, "b": b}


def test_component_coverage_is_the_window_before_each_frontier_and_the_frontier_state():
    h, n = two_sessions("component")
    assert covered(h.tree, Kind.SWA) == {n["a3"].id, n["a2"].id, n["b"].id}  # 1 + 1 page
    assert covered(h.tree, Kind.MAMBA) == {n["a3"].id, n["b"].id}


def test_path_coverage_evicts_the_other_sessions_old_window_first():
    h, n = two_sessions("path")
    res = h.evict_device(1, Kind.SWA)  # all referenced: plain LRU, b (a leaf) goes whole
    assert [a.node_id for a in res.actions if isinstance(a, Deleted)] == [n["b"].id]
    assert "S2" not in h.tree.frontiers  # its frontier left with it (its parent is root)
    h.check_accounting()


def test_component_coverage_tombstones_the_uncovered_ancestor_first():
    h, n = two_sessions("component")
    res = h.evict_device(1, Kind.SWA)
    assert [(a.node_id, a.kind) for a in res.actions
            if not isinstance(a, Deleted)][:1] == [(n["a1"].id, Kind.SWA)]
    assert n["b"].id in h.tree.nodes and Kind.SWA in n["b"].device
    h.check_accounting()


def test_close_session_drops_its_frontier():
    h, n = two_sessions("component")
    h.tree.close_session("S1")
    assert covered(h.tree, Kind.MAMBA) == {n["b"].id}


def test_a_bad_coverage_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="session_coverage"):
        CacheConfig.from_mapping({"session_coverage": "tail"})
