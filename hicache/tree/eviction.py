"""Eviction strategies as pure key functions, and a lazy heap that orders candidates.

A strategy maps a node to a sort key; the smallest key is evicted first. Session-aware
eviction wraps the base key: ``(has session refs, number of refs, base key)`` so that
unreferenced data goes first, then data fewer sessions still reference.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from hicache.tree.node import Node

KeyFn = Callable[[Node], tuple]


def lru(n: Node) -> tuple:
    return (n.last_access,)


def lfu(n: Node) -> tuple:
    return (n.hit_count, n.last_access)


def fifo(n: Node) -> tuple:
    return (n.created,)


def mru(n: Node) -> tuple:
    return (-n.last_access,)


def filo(n: Node) -> tuple:
    return (-n.created,)


def priority(n: Node) -> tuple:
    return (n.priority, n.last_access)


def slru(n: Node) -> tuple:
    """Segmented LRU: entries hit at least twice are protected behind all probation ones."""
    return (n.hit_count >= 2, n.last_access)


STRATEGIES: dict[str, KeyFn] = {
    "lru": lru, "lfu": lfu, "fifo": fifo, "mru": mru, "filo": filo,
    "priority": priority, "slru": slru,
}


def strategy(name: str, *, session_aware: bool = False) -> KeyFn:
    try:
        base = STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"radix_eviction_policy: unknown {name!r}; allowed: {', '.join(STRATEGIES)}"
        ) from None
    if not session_aware:
        return base

    def session_key(n: Node) -> tuple:
        refs = n.session_refs
        return (refs > 0, refs, *base(n))

    return session_key


class LazyHeap:
    """Min-heap of (key, last access, node) with lazy invalidation by ``node.stamp``.

    Push a node whenever its key may have changed (after bumping its stamp); stale entries
    are skipped when popped. ``pop_valid`` yields nodes in key order that pass ``ok``.
    Equal keys fall back to recency, as SGLang's heap compares nodes by last access.
    """

    def __init__(self, key: KeyFn) -> None:
        self.key = key
        # the LRU key ``(last_access,)`` entered as its bare item: a 1-tuple compares as
        # its item does, so every comparison, hence every sift and pop, is the same, with
        # no key call or key tuple per push and an int comparison, not two nested tuple
        # ones, per sift step (the default strategy; every entry of a heap has one form)
        self._flat = key is lru
        self._heap: list[tuple[tuple | int, int, int, int, Node]] = []
        self._seq = 0

    def push(self, node: Node) -> None:
        self._seq += 1
        if self._flat:
            last = node.last_access
            heapq.heappush(self._heap, (last, last, self._seq, node.stamp, node))
        else:
            heapq.heappush(self._heap,
                           (self.key(node), node.last_access, self._seq, node.stamp, node))

    def __len__(self) -> int:
        return len(self._heap)

    def live(self) -> set[int]:
        """Ids of the nodes with a live (not stale) entry: what :meth:`pop_valid` can
        still yield. O(entries), for invariant checks."""
        return {node.id for *_, stamp, node in self._heap if stamp == node.stamp}

    def drop_all_unless(self, ok: Callable[[Node], bool], exempt: Node | None,
                        keep: Node | None) -> bool:
        """If no live entry's node but ``exempt`` satisfies ``ok``: drop every entry but
        ``keep``'s live one (if any) and return True; else change nothing, return False.

        Invariant: True leaves the live entries that draining :meth:`pop_valid` (which
        then yields nothing, ``exempt`` failing ``ok`` meanwhile) and pushing ``keep``
        again would leave; the pop order reads only live entries (a node has at most one,
        and keys with last access tell nodes apart), so no later pop can differ."""
        kept = None
        for entry in self._heap:
            node = entry[4]
            if entry[3] != node.stamp:  # stale
                continue
            if node is keep:
                kept = entry
            if node is not exempt and ok(node):
                return False
        self._heap = [kept] if kept is not None else []
        return True

    def pop_valid(self, ok: Callable[[Node], bool]) -> Iterator[Node]:
        """Pop entries in order; yield live ones that satisfy ``ok``. Entries that are
        stale are dropped; live ones failing ``ok`` are dropped too (their owner pushes
        them again when they become eligible, e.g. on unlock)."""
        heap, pop = self._heap, heapq.heappop
        while heap:
            entry = pop(heap)
            node = entry[4]
            if entry[3] != node.stamp:  # (key, last access, seq, stamp, node)
                continue
            if ok(node):
                yield node
