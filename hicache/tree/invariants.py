"""The tree's invariants, checked in one place (tests, the soak benchmark).

    check_tree(tree)   raises TreeInvariantError naming the first broken rule

Rules (O(nodes + pages held); call it every N steps, not on every operation):
- structure: every node is reachable from the root exactly once, under its parent's
  ``children[key[0]]``, with a non-empty key; ``tree.nodes`` is exactly that set;
- a leaf holds FULL on L1 or L2, or is being backed up (empty leaves are deleted);
- each FULL extent covers its node's pages; no page of a pool is held by two nodes;
- ``residency.held`` equals the pages the nodes hold, per tier and pool;
- lock counts equal the live handles' entries (no count <= 0 is kept), and
  ``node.lock_handles`` names exactly the live handles with an entry on the node;
- every session's node set is exactly the nodes that carry its reference;
- every FULL leaf eviction could take now (an unlocked L1 leaf, an unlocked L2-only
  leaf) has a live entry in its eviction heap: the evictor can reach it.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from hicache.runtime.handles import Tier
from hicache.tree.components import Kind

if TYPE_CHECKING:
    from hicache.tree.node import Node
    from hicache.tree.radix import UnifiedRadixTree


class TreeInvariantError(AssertionError):
    """A broken tree invariant (a bug, never bad input)."""


def _fail(message: str) -> None:
    raise TreeInvariantError(message)


def check_tree(tree: UnifiedRadixTree) -> None:
    """Check every rule of the module docstring; raise at the first broken one."""
    seen = _check_structure(tree)
    held: Counter = Counter()
    owner: dict[tuple[Tier, Kind, int], int] = {}
    for node in seen:
        if not node.children and not (node.on_device or node.on_host or node.backing_up):
            _fail(f"{node}: a leaf with no FULL data on L1 or L2 and no backup under way")
        for tier, values in ((Tier.DEVICE, node.device), (Tier.HOST, node.host)):
            for kind, ext in values.items():
                if kind is Kind.FULL and ext.num_pages != node.num_pages:
                    _fail(f"{node}: {tier.value} FULL extent of {ext.num_pages} pages on a "
                          f"node of {node.num_pages}")
                held[(tier, ext.pool)] += ext.num_pages
                for page in ext.pages():
                    other = owner.setdefault((tier, ext.pool, page), node.id)
                    if other != node.id:
                        _fail(f"{tier.value} page {page} of pool {ext.pool} is held by "
                              f"nodes {other} and {node.id}")
    counters = {k: v for k, v in tree.residency.held.items() if v}
    if counters != {k: v for k, v in held.items() if v}:
        _fail(f"residency.held {counters} != pages the nodes hold {dict(held)}")
    _check_locks(tree, seen)
    _check_sessions(tree, seen)
    _check_heaps(tree, seen)


def _check_structure(tree: UnifiedRadixTree) -> list[Node]:
    seen: list[Node] = []
    ids: set[int] = set()
    stack = [tree.root]
    while stack:
        parent = stack.pop()
        for first, child in parent.children.items():
            if child.parent is not parent:
                _fail(f"{child}: parent link does not point at {parent}")
            if not child.key or child.key[0] != first:
                _fail(f"{child}: filed under {first!r} but its key starts "
                      f"{child.key[:1]!r}")
            if child.id in ids:
                _fail(f"{child}: reachable twice")
            ids.add(child.id)
            seen.append(child)
            stack.append(child)
    if ids != set(tree.nodes) or any(tree.nodes[i] is not n for n in seen for i in (n.id,)):
        _fail(f"tree.nodes ({len(tree.nodes)}) is not the set of reachable nodes ({len(ids)})")
    return seen


def _check_locks(tree: UnifiedRadixTree, nodes: list[Node]) -> None:
    counts: dict[int, Counter] = {}
    handles: dict[int, set[int]] = {}
    for h in tree.locks.live.values():
        if h.released:
            _fail(f"lock handle {h.id} is released but still live")
        for node, key in h.entries:
            if tree.nodes.get(node.id) is not node:
                _fail(f"lock handle {h.id} holds {node}, which left the tree")
            counts.setdefault(node.id, Counter())[key] += 1
            handles.setdefault(node.id, set()).add(h.id)
    for node in nodes:
        want = counts.get(node.id, Counter())
        if node.locks != dict(want):
            _fail(f"{node}: lock counts {_show(node.locks)} but live handles hold "
                  f"{_show(want)}")
        if node.lock_handles != handles.get(node.id, set()):
            _fail(f"{node}: lock_handles {sorted(node.lock_handles)} != live handles "
                  f"{sorted(handles.get(node.id, set()))}")


def _show(counts: dict) -> dict[str, int]:
    return {str(getattr(k, "value", k)): v for k, v in counts.items()}


def _check_sessions(tree: UnifiedRadixTree, nodes: list[Node]) -> None:
    carried: dict[str, set[int]] = {}
    for node in nodes:
        for sid in node.sessions:
            carried.setdefault(sid, set()).add(node.id)
    for sid, held in tree.sessions.items():
        if {n.id for n in held} != carried.get(sid, set()):
            _fail(f"session {sid!r}: holds {len(held)} nodes, {len(carried.get(sid, ()))} "
                  f"carry its reference")
    missing = set(carried) - set(tree.sessions)
    if missing:
        _fail(f"nodes carry references of closed sessions {sorted(missing)}")
    # SGLang's count: one reference per end of the session's paths at or below the node
    expected: dict[tuple[str, int], int] = {}
    for sid, ends in tree.session_leaves.items():
        for end in ends:
            for n in tree.path_to_root(end):
                expected[sid, n.id] = expected.get((sid, n.id), 0) + 1
    counts = {(sid, node.id): c for node in nodes for sid, c in node.sessions.items()}
    if counts != expected:
        wrong = sorted(k for k in counts.keys() | expected.keys()
                       if counts.get(k) != expected.get(k))
        sid, nid = wrong[0]
        _fail(f"node {nid}: session {sid!r} count {counts.get((sid, nid), 0)}, "
              f"{expected.get((sid, nid), 0)} ends of its paths at or below it")


def _check_heaps(tree: UnifiedRadixTree, nodes: list[Node]) -> None:
    res = tree.residency
    for name, heap, evictable in (("L1", res.device_heap, res.device_evictable),
                                  ("L2", res.host_heap, res.host_evictable)):
        live = heap.live()
        lost = [n for n in nodes if evictable(n) and n.id not in live]
        if lost:
            _fail(f"{len(lost)} evictable {name} leaves have no live eviction-heap entry "
                  f"(the evictor cannot reach them), first {lost[0]}")
