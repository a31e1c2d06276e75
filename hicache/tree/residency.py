"""Where each node's data lives (L1/L2) and how it leaves: eviction and backup state.

    FULL on L1   evict device leaves (FULL on L1, no child on L1) by the strategy key;
                 a backed-up leaf is demoted to host-only, others are deleted (with any
                 host-only descendants); under write_back a leaf is first backed up
    SWA, MAMBA   per-component LRU over nodes holding them on L1: a long node is split at
                 the retention boundary (its head loses SWA), a leaf is evicted whole,
                 an internal node gets a tombstone; session-referenced nodes go last
    L2           host-only leaves without a host lock, by the strategy key

A node being backed up is locked until :meth:`complete_backup`. Nothing here frees
memory: it returns actions.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hicache.runtime.handles import CacheExtentRef
from hicache.tree.actions import Action, BackupNode, Deleted, Demoted, FreeDevice, FreeHost
from hicache.tree.components import Kind
from hicache.tree.eviction import KeyFn, LazyHeap
from hicache.tree.node import HOST, Node

if TYPE_CHECKING:
    from hicache.tree.radix import UnifiedRadixTree


@dataclass
class EvictResult:
    actions: list[Action] = field(default_factory=list)
    freed: dict[str, int] = field(default_factory=dict)  # pool -> pages (MAMBA: slots)

    def add_free(self, action: FreeDevice | FreeHost) -> None:
        self.actions.append(action)
        pool = action.extent.pool
        self.freed[pool] = self.freed.get(pool, 0) + action.extent.num_pages


class Residency:
    def __init__(self, tree: UnifiedRadixTree, key: KeyFn) -> None:
        self.tree = tree
        self.device_heap = LazyHeap(key)
        self.host_heap = LazyHeap(key)
        self.lru: dict[Kind, OrderedDict[Node, None]] = {
            k: OrderedDict() for k in (Kind.SWA, Kind.MAMBA) if tree.spec.get(k)}
        self.host_enabled = False
        self.write_back = False
        self.held: dict[tuple[str, str], int] = {}  # ("device"|"host", pool) -> pages held
        self._jobs: dict[int, list[Node]] = {}  # job id -> nodes covering the backed-up span
        self._job_of: dict[int, int] = {}  # node id -> job id
        self._job_kinds: dict[int, frozenset[Kind]] = {}  # job id -> components copied

    # -- hooks from the tree -----------------------------------------------------------
    def touched(self, node: Node) -> None:
        node.stamp += 1
        if node.on_device:
            if node.is_device_leaf():
                self.device_heap.push(node)
            for kind, lru in self.lru.items():
                if kind in node.device:
                    lru[node] = None
                    lru.move_to_end(node)
        elif node.on_host and not node.children:
            self.host_heap.push(node)

    added = touched
    unlocked = touched

    # -- the only places values enter or leave nodes (keeps ``held`` exact) -----------
    def put_value(self, node: Node, attr: str, kind: Kind, ext: CacheExtentRef) -> None:
        getattr(node, attr)[kind] = ext
        key = (attr, ext.pool)
        self.held[key] = self.held.get(key, 0) + ext.num_pages
        if attr == "device" and kind in self.lru:
            self.lru[kind][node] = None

    def pop_value(self, node: Node, attr: str, kind: Kind) -> CacheExtentRef:
        ext: CacheExtentRef = getattr(node, attr).pop(kind)
        self.held[(attr, ext.pool)] -= ext.num_pages
        if attr == "device" and kind in self.lru:
            self.lru[kind].pop(node, None)
        return ext

    def held_pages(self, attr: str, pool: str = "full") -> int:
        return self.held.get((attr, pool), 0)

    def on_split(self, tail: Node, head: Node) -> None:
        for kind, lru in self.lru.items():
            if kind in head.device:
                lru[head] = None
        job = self._job_of.get(tail.id)
        if job is not None:
            nodes = self._jobs[job]
            nodes.insert(nodes.index(tail), head)
            self._job_of[head.id] = job

    # -- backup ----------------------------------------------------------------------
    def begin_backup(self, node: Node) -> BackupNode:
        """Lock ``node`` while its device data is copied to L2 (write policy or eviction)."""
        if node.backing_up:
            raise ValueError(f"{node} is already being backed up")
        if not node.on_device:
            raise ValueError(f"{node} has no device data to back up")
        node.backing_up = True
        self._jobs[node.id] = [node]
        self._job_of[node.id] = node.id
        self._job_kinds[node.id] = frozenset(node.device)
        return BackupNode(node.id, tuple(node.device.items()),
                          node.num_pages * self.tree.spec.page_size)

    def complete_backup(self, job_id: int, host: dict[Kind, CacheExtentRef]) -> list[Node]:
        """The L2 copy of backup ``job_id`` exists at ``host`` (extents over the whole
        original span); spread it over the nodes the span was split into."""
        nodes = self._jobs.pop(job_id)
        del self._job_kinds[job_id]
        offset = 0
        for i, node in enumerate(nodes):
            del self._job_of[node.id]
            for kind, ext in host.items():
                if kind is Kind.MAMBA:
                    if i == len(nodes) - 1 and kind not in node.host:
                        self.put_value(node, "host", kind, ext)
                elif kind not in node.host:
                    self.put_value(node, "host", kind,
                                   ext.slice(offset, offset + node.num_pages))
            offset += node.num_pages
            node.backing_up = False
            self.touched(node)
        return nodes

    def abort_backup(self, job_id: int) -> None:
        del self._job_kinds[job_id]
        for node in self._jobs.pop(job_id):
            del self._job_of[node.id]
            node.backing_up = False
            self.touched(node)

    def backup_covers(self, node: Node, kind: Kind) -> bool:
        """An in-flight backup will give ``node`` its L2 copy of ``kind``."""
        job = self._job_of.get(node.id)
        if job is None or kind not in self._job_kinds[job]:
            return False
        return kind is not Kind.MAMBA or self._jobs[job][-1] is node

    def backing_up(self) -> int:
        return len(self._jobs)

    # -- eviction --------------------------------------------------------------------
    def _device_evictable(self, n: Node) -> bool:
        return (n.parent is not None and n.is_device_leaf() and not n.any_device_lock()
                and not n.backing_up)

    def evict_device(self, kind: Kind, pages: int) -> EvictResult:
        """Free at least ``pages`` L1 pages of ``kind``'s pool if possible."""
        res = EvictResult()
        pool = kind.value
        if kind is Kind.FULL:
            for node in self.device_heap.pop_valid(self._device_evictable):
                self._evict_leaf(node, res)
                if res.freed.get(pool, 0) >= pages:
                    break
            return res
        for node in self._lru_order(kind):
            if res.freed.get(pool, 0) >= pages:
                break
            if node.parent is None or kind not in node.device or node.locked(kind) \
                    or node.backing_up:
                continue
            self._evict_component(node, kind, res)
        return res

    def _lru_order(self, kind: Kind) -> list[Node]:
        nodes = list(self.lru[kind])
        return [n for n in nodes if not n.sessions] + [n for n in nodes if n.sessions]

    def _evict_component(self, node: Node, kind: Kind, res: EvictResult) -> None:
        spec = self.tree.spec
        comp = spec.get(kind)
        assert comp is not None
        if kind is Kind.SWA:
            keep = math.ceil(comp.window / spec.page_size)
            if node.num_pages > keep:  # split at the retention boundary, drop the head
                head = self.tree.split(node, node.num_pages - keep)
                self._tombstone(head, kind, res)
                return
        if self._device_evictable(node):
            self._evict_leaf(node, res)
        else:
            self._tombstone(node, kind, res)

    def _tombstone(self, node: Node, kind: Kind, res: EvictResult) -> None:
        res.add_free(FreeDevice(node.id, kind, self.pop_value(node, "device", kind)))

    def _drop_device(self, node: Node, res: EvictResult) -> None:
        for kind in list(node.device):
            res.add_free(FreeDevice(node.id, kind, self.pop_value(node, "device", kind)))

    def _evict_leaf(self, node: Node, res: EvictResult) -> None:
        """Evict a device leaf; then any parent left as an evictable device leaf with an
        SWA tombstone (it could never serve reuse) goes too, iteratively."""
        nxt: Node | None = node
        while nxt is not None:
            nxt = self._evict_one_leaf(nxt, res)

    def _swa_tombstone_leaf(self, n: Node) -> bool:
        return (Kind.SWA in self.lru and Kind.SWA not in n.device
                and self._device_evictable(n))

    def _evict_one_leaf(self, node: Node, res: EvictResult) -> Node | None:
        tokens = node.num_pages * self.tree.spec.page_size
        parent = node.parent
        if self.host_enabled and node.on_host:
            self._drop_device(node, res)
            res.actions.append(Demoted(node.id, tokens))
            self.touched(node)
        elif self.host_enabled and self.write_back:
            res.actions.append(self.begin_backup(node))
            return None
        else:
            if any(n.locked(HOST) or n.backing_up for n in self._subtree(node)):
                return None
            for n in reversed(self._subtree(node)):
                self._drop_device(n, res)
                for kind in list(n.host):
                    res.add_free(FreeHost(n.id, kind, self.pop_value(n, "host", kind)))
                self.tree.remove(n)
                res.actions.append(Deleted(n.id, n.num_pages * self.tree.spec.page_size))
        if parent is not None and parent is not self.tree.root:
            self.touched(parent)
            if self._swa_tombstone_leaf(parent):
                return parent
        return None

    @staticmethod
    def _subtree(node: Node) -> list[Node]:
        out, stack = [], [node]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def _host_evictable(self, n: Node) -> bool:
        return (n.parent is not None and not n.on_device and n.on_host and not n.children
                and not n.locked(HOST) and not n.backing_up)

    def evict_host(self, pages: int) -> EvictResult:
        """Free at least ``pages`` L2 FULL pages by deleting host-only leaves."""
        res = EvictResult()
        for node in self.host_heap.pop_valid(self._host_evictable):
            parent = node.parent
            for kind in list(node.host):
                res.add_free(FreeHost(node.id, kind, self.pop_value(node, "host", kind)))
            self.tree.remove(node)
            res.actions.append(Deleted(node.id, node.num_pages * self.tree.spec.page_size))
            if parent is not None and parent is not self.tree.root:
                self.touched(parent)
            if res.freed.get("full", 0) >= pages:
                break
        return res
