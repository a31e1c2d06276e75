"""check_tree (hicache.tree.invariants) passes on a healthy tree and names each broken rule.
(The stateful property tests call it after every step, through Harness.check_accounting.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tree_harness import Harness

from hicache.runtime.handles import Tier
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.invariants import TreeInvariantError, check_tree
from hicache.tree.radix import UnifiedRadixTree


def built() -> UnifiedRadixTree:
    """Two prompts sharing a prefix (so a split), a lock, a session, an L2 copy."""
    h = Harness(TreeSpec(4), host_enabled=True)
    h.insert(h.pages([1, 2, 3]))
    h.insert(h.pages([1, 2, 4, 5]))
    tree = h.tree
    leaf = tree.match(h.pages([1, 2, 4, 5])).last_node
    tree.lock(leaf)
    tree.reference_session("s", leaf)
    node = tree.match(h.pages([1, 2, 3])).last_node
    job = h.begin_backup(node)
    h.complete_backup(job)
    return tree


def _a_leaf(tree: UnifiedRadixTree):  # noqa: ANN202
    return next(n for n in tree.nodes.values() if not n.children)


def _share_pages(tree: UnifiedRadixTree) -> None:
    """Give one node another's L1 pages (same length, so only ownership is wrong)."""
    by_len: dict[int, list] = {}
    for n in tree.nodes.values():
        if n.on_device:
            by_len.setdefault(n.num_pages, []).append(n)
    a, b = next(ns for ns in by_len.values() if len(ns) >= 2)[:2]
    b.device[Kind.FULL] = a.device[Kind.FULL]


CORRUPTIONS: list[tuple[str, Callable[[UnifiedRadixTree], None], str]] = [
    ("forgotten node", lambda t: t.nodes.pop(_a_leaf(t).id), "not the set of reachable"),
    ("wrong parent", lambda t: setattr(_a_leaf(t), "parent", t.root), "parent link"),
    ("extra lock", lambda t: _a_leaf(t).locks.__setitem__(Kind.FULL, 9), "lock counts"),
    ("stray handle", lambda t: _a_leaf(t).lock_handles.add(999), "lock_handles"),
    ("held counter", lambda t: t.residency.held.__setitem__((Tier.DEVICE, Kind.FULL), 1),
     "residency.held"),
    ("empty leaf", lambda t: [t.residency.pop_value(_a_leaf(t), tier, Kind.FULL)
                              for tier, a in ((Tier.DEVICE, "device"), (Tier.HOST, "host"))
                              if Kind.FULL in getattr(_a_leaf(t), a)],
     "a leaf with no FULL data"),
    ("session", lambda t: t.sessions["s"].clear(), "session 's'"),
    ("page twice", _share_pages, "is held by nodes"),
]


def test_a_healthy_tree_passes() -> None:
    check_tree(built())


@pytest.mark.parametrize("name, corrupt, message", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_each_broken_rule_is_named(name, corrupt, message) -> None:
    tree = built()
    corrupt(tree)
    with pytest.raises(TreeInvariantError, match=message):
        check_tree(tree)
