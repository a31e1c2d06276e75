"""``LockTable.unlock`` re-queues each node whose last lock of a key goes with
``Residency.touched`` written in its own loop. Twin trees, one whose unlock calls
``residency.unlocked`` per node (the reference), driven by the same random locks,
unlocks, inserts, backups and evictions (FULL-only and hybrid SWA+MAMBA, L2 on), must end
alike: the same nodes, stamps, lock counts and heap entries (so the same evictions)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.tree.components import Kind, TreeSpec
from hicache.tree.locks import LockHandle, LockTable
from tests.tree.tree_harness import Harness

seqs = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=5)
ops = st.lists(st.tuples(st.sampled_from(["lock", "lock_host", "unlock", "insert", "evict",
                                          "backup", "evict_host", "match"]),
                         st.integers(0, 4), st.integers(1, 6)), max_size=40)
SPECS = [TreeSpec(2), TreeSpec.hybrid(2, swa_window=4, mamba=True)]


def reference_unlock(self: LockTable, h: LockHandle) -> None:
    """The unlock before the in-line touch: ``residency.unlocked`` per node."""
    if h.released:
        raise ValueError(f"lock handle {h.id} released twice")
    h.released = True
    self.tree.changes += 1
    del self.live[h.id]
    residency, hid = self.tree.residency, h.id
    for node, key in h.entries:
        count = node.locks[key] - 1
        if count < 0:
            raise AssertionError(f"lock count of {node} for {key} went negative")
        if count:
            node.locks[key] = count
        else:
            del node.locks[key]
            residency.unlocked(node)
        node.lock_handles.discard(hid)


def _end(h: Harness) -> tuple:
    """Everything an unlock can change: nodes (state), stamps, locks and both heaps."""
    t = h.tree
    nodes = sorted((n.id, n.stamp, sorted((str(k), c) for k, c in n.locks.items()),
                    sorted(n.lock_handles)) for n in t.nodes.values())
    res = t.residency
    heaps = [sorted((e[0], e[1], e[2], e[3], e[4].id) for e in heap._heap)
             for heap in (res.device_heap, res.host_heap)]
    return h.state(), nodes, heaps


def _twins(spec: TreeSpec) -> list[Harness]:
    trees = [Harness(spec, device_pages=40, host_enabled=True) for _ in range(2)]
    trees[1].tree.locks.unlock = reference_unlock.__get__(trees[1].tree.locks)  # type: ignore[method-assign]
    return trees


@settings(max_examples=150)
@given(st.sampled_from(SPECS), seqs, ops)
def test_the_inline_touch_unlocks_as_touched_does(spec: TreeSpec, sequences: list[list[int]],
                                                  script: list) -> None:
    trees = _twins(spec)
    lists = [[h.pages(s) for s in sequences] for h in trees]
    held: list[list[LockHandle]] = [[], []]
    evicted: list[list] = [[], []]
    for op, i, n in script:
        for h, pages, locks, seen in zip(trees, lists, held, evicted, strict=True):
            p = pages[i % len(pages)]
            if op == "lock":
                locks.append(h.tree.lock(h.tree.match(p[:n]).last_node))
            elif op == "lock_host":
                path = h.tree.match(p, touch=False).path
                locks.append(h.tree.locks.lock_host([x for x in path if x.on_host]))
            elif op == "unlock":
                if locks:
                    h.tree.unlock(locks.pop(n % len(locks)))
            elif op == "match":
                h.tree.match(p)
            elif op == "evict":
                seen.append([(type(a).__name__, a.node_id) for a in h.evict_device(n).actions])
            elif op == "evict_host":
                seen.append([(type(a).__name__, a.node_id) for a in h.evict_host(n).actions])
            else:
                h.change(op, p, n)
        assert evicted[0] == evicted[1]
        assert _end(trees[0]) == _end(trees[1])
    for h, locks in zip(trees, held, strict=True):
        for lock in locks:
            h.tree.unlock(lock)
        assert not any(n.locks for n in h.tree.nodes.values())
        h.evict_device(1000, Kind.FULL)
    assert _end(trees[0]) == _end(trees[1])
