"""A recency list of tree nodes, as SGLang's ``UnifiedLRUList`` keeps one per SWA/MAMBA.

    MRU  n7 <-> n3 <-> n9 <-> n2  LRU        push_mru(n)          n becomes the MRU
                                             insert_after(n3, m)  m lands between n3 and n9
                                             lru() == n2, newer(n2) == n9   (an eviction walk)

A plain ``OrderedDict`` cannot place a node next to another one, which a split needs (the
new upper part goes just behind the lower part, SGLang's ``insert_after``). Every
operation is O(1); a walk from the LRU end visits each node once.
"""

from __future__ import annotations

from collections.abc import Iterator

from hicache.tree.node import Node


class LruList:
    __slots__ = ("_newer", "_older", "_head", "_tail")

    def __init__(self) -> None:
        self._head = object()  # sentinel before the MRU node
        self._tail = object()  # sentinel after the LRU node
        self._newer: dict[object, object] = {self._tail: self._head}
        self._older: dict[object, object] = {self._head: self._tail}

    def __contains__(self, node: object) -> bool:
        return node in self._newer and node is not self._tail

    def __len__(self) -> int:
        return len(self._newer) - 1

    def _link(self, node: Node, newer: object) -> None:
        older = self._older[newer]
        self._newer[node], self._older[node] = newer, older
        self._older[newer] = node
        self._newer[older] = node

    def remove(self, node: Node) -> None:
        newer, older = self._newer.pop(node), self._older.pop(node)
        self._older[newer] = older
        self._newer[older] = newer

    def discard(self, node: Node) -> None:
        if node in self:
            self.remove(node)

    def push_mru(self, node: Node) -> None:
        """Make ``node`` the most recently used (moving it if present)."""
        self.discard(node)
        self._link(node, self._head)

    def insert_after(self, anchor: Node, node: Node) -> None:
        """Place ``node`` just behind ``anchor`` (one step less recent)."""
        self.discard(node)
        self._link(node, anchor)

    def lru(self) -> Node | None:
        """The least recently used node, or None when empty."""
        node = self._newer[self._tail]
        return None if node is self._head else node  # type: ignore[return-value]

    def newer(self, node: Node) -> Node | None:
        """The next node towards the MRU end, or None at the MRU end."""
        nxt = self._newer[node]
        return None if nxt is self._head else nxt  # type: ignore[return-value]

    def __iter__(self) -> Iterator[Node]:
        """From the LRU end to the MRU end."""
        node = self.lru()
        while node is not None:
            yield node
            node = self.newer(node)
