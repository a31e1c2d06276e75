"""Per-component locks with the scopes of the unified tree.

    FULL   the whole path to the root          (reuse needs every page)
    SWA    back one window from the node's end  (reuse needs the last window)
    MAMBA  the node itself                      (its checkpoint)
    HOST   the given nodes' L2 copies           (while a load or backup reads them)

Each lock returns a :class:`LockHandle` that records exactly which (node, key) counts it
raised, so unlock lowers the same counts. When a locked node is split, the new upper node
joins every handle that held FULL, SWA or HOST on it (locking a little more, never less),
so counts always return to zero. Locked data is never evicted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hicache.tree.components import Kind
from hicache.tree.node import HOST, Node

if TYPE_CHECKING:
    from hicache.tree.radix import UnifiedRadixTree

LockKey = Kind | str
_FULL, _SWA, _MAMBA = Kind.FULL, Kind.SWA, Kind.MAMBA  # hot: Enum reads (ARCHITECTURE.md)
_SPLIT_INHERITS = (Kind.FULL, Kind.SWA, HOST)


@dataclass(eq=False)
class LockHandle:
    id: int
    entries: list[tuple[Node, LockKey]] = field(default_factory=list)
    released: bool = False


class LockTable:
    def __init__(self, tree: UnifiedRadixTree) -> None:
        self.tree = tree
        self._next = 1
        self.live: dict[int, LockHandle] = {}

    def _handle(self) -> LockHandle:
        h = LockHandle(self._next)
        self._next += 1
        self.live[h.id] = h
        return h

    def _raise(self, h: LockHandle, node: Node, key: LockKey) -> None:
        node.locks[key] = node.locks.get(key, 0) + 1
        self.tree.changes += 1
        node.lock_handles.add(h.id)
        h.entries.append((node, key))

    def _raise_up(self, h: LockHandle, node: Node, stop: Node | None) -> None:
        """:meth:`_raise` FULL on ``node`` and each ancestor below ``stop``, deepest first
        (in line: every lock of a request's path takes this loop)."""
        tree, hid, add, full = self.tree, h.id, h.entries.append, _FULL
        n: Node | None = node
        while n is not stop and n is not None:
            locks = n.locks
            locks[full] = locks.get(full, 0) + 1
            tree.changes += 1
            n.lock_handles.add(hid)
            add((n, full))
            n = n.parent

    def lock(self, node: Node | None, kinds: Iterable[Kind] | None = None) -> LockHandle:
        """Lock the data a request reuses when its match ends at ``node``."""
        h = self._handle()
        if node is None or node is self.tree.root:
            return h
        spec = self.tree.spec
        for kind in (kinds if kinds is not None else spec.kinds):
            if kind is _FULL:
                self._raise_up(h, node, self.tree.root)
            elif kind is _SWA:
                comp = spec.get(_SWA)
                assert comp is not None
                need = comp.window
                for n in self.tree.path_to_root(node):
                    if need <= 0:
                        break
                    self._raise(h, n, _SWA)
                    need -= n.num_pages * spec.page_size
            elif kind is _MAMBA:
                self._raise(h, node, _MAMBA)
        return h

    def move(self, h: LockHandle, node: Node) -> LockHandle:
        """``lock(node)`` then ``unlock(h)``: the holder of ``h`` now holds its path down
        to ``node``. When the tree has FULL only and ``node`` lies below the deepest node
        ``h`` locks (an insert extended the path), ``h`` takes the nodes in between
        instead, deepest first: the counts and the entries' nodes of ``lock(node)``, and
        what nothing but this handle could see (its id, the order of entries a split
        appended) is ``h``'s."""
        top = h.entries[0][0] if h.entries and not h.released else None
        if top is None or len(self.tree.spec.components) > 1:  # FULL is always one
            return self._relock(h, node)
        n: Node | None = node
        while n is not top:
            if n is None or n is self.tree.root:
                return self._relock(h, node)  # not below: lock anew
            n = n.parent
        held = len(h.entries)
        self._raise_up(h, node, top)
        h.entries[:] = h.entries[held:] + h.entries[:held]  # deepest first, as lock's
        return h

    def _relock(self, h: LockHandle, node: Node) -> LockHandle:
        new = self.lock(node)
        self.unlock(h)
        return new

    def lock_host(self, nodes: Iterable[Node]) -> LockHandle:
        h = self._handle()
        for n in nodes:
            self._raise(h, n, HOST)
        return h

    def unlock(self, h: LockHandle) -> None:
        if h.released:
            raise ValueError(f"lock handle {h.id} released twice")
        h.released = True
        self.tree.changes += 1
        del self.live[h.id]
        tree, hid = self.tree, h.id
        residency = tree.residency
        device_heap, host_heap, full = residency.device_heap, residency.host_heap, _FULL
        for node, key in h.entries:
            locks = node.locks
            count = locks[key] - 1
            if count < 0:
                raise AssertionError(f"lock count of {node} for {key} went negative")
            node.lock_handles.discard(hid)  # touched reads no lock_handles: either order
            if count:
                locks[key] = count
                continue
            del locks[key]
            # residency.unlocked(node) (Residency.touched), in line: every lock's path
            node.stamp += 1
            tree.changes += 1
            if full in node.device:
                for c in node.children.values():
                    if full in c.device:
                        break
                else:
                    if not locks or (len(locks) == 1 and HOST in locks):
                        device_heap.push(node)
            elif full in node.host and not node.children and HOST not in locks:
                host_heap.push(node)

    def on_split(self, tail: Node, head: Node) -> None:
        for hid in list(tail.lock_handles):
            h = self.live[hid]
            keys = {k for n, k in h.entries if n is tail and k in _SPLIT_INHERITS}
            for key in keys:
                self._raise(h, head, key)
