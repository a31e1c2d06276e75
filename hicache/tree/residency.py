"""Where each node's data lives (L1/L2) and how it leaves: eviction and backup state.

Eviction decides as SGLang 0.5.23's ``UnifiedRadixCache`` does:

    FULL on L1   device leaves (FULL on L1, no child on L1, nothing locked) by the strategy
                 key; a backed-up leaf is demoted to host-only, others are deleted (with
                 any host-only descendants); under write_back a leaf is first backed up.
                 The parent of an evicted leaf joins the candidates with its own key.
                 A leaf whose write_back backup starts counts toward the pages asked
                 for (SGLang backs a victim up and demotes it before the next): the walk
                 backs up what the eviction needs, not every evictable leaf.
    SWA, MAMBA   a walk from the LRU end of the component's recency list (lru.py): a
                 device leaf is evicted whole (every component), an internal node loses
                 that component (a tombstone; SWA takes the node's MAMBA along, the lower
                 priority); with session-aware eviction referenced nodes go last
    L2           host-only leaves without a host lock, by the strategy key

Every walk stops as soon as it has freed what was asked (``evict(0)`` frees nothing).
Recency: FULL orders by ``Node.last_access`` (the tree stamps it); SWA and MAMBA order
by their lists, which the tree refreshes at the end of a match or an insert only: SWA the
end node and the ancestors within one window plus a page, MAMBA the matched node alone.

A node being backed up is locked until :meth:`complete_backup`. Nothing here frees
memory: it returns actions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.slot_init import slot_builder
from hicache.tree.actions import Action, BackupNode, Deleted, Demoted, FreeDevice, FreeHost
from hicache.tree.components import Kind
from hicache.tree.eviction import KeyFn, LazyHeap
from hicache.tree.lru import LruList
from hicache.tree.node import HOST, Node
from hicache.tree.options import SGLANG, TreeOptions
from hicache.tree.session_coverage import COVERAGES, covered

if TYPE_CHECKING:
    from hicache.tree.radix import UnifiedRadixTree

# Kind.FULL read once: an attribute of an Enum class costs a metaclass __getattr__ hook
# per read (about 8x a module global), and touched runs for every node a change reaches
_FULL, _SWA, _MAMBA = Kind.FULL, Kind.SWA, Kind.MAMBA  # hot: Enum reads (ARCHITECTURE.md)
_DEVICE, _HOST = Tier.DEVICE, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)
# the actions of L1 and L2 evictions, built at slot speed (slot_builder; ARCHITECTURE.md)
_free_device, _demoted = slot_builder(FreeDevice), slot_builder(Demoted)
_free_host, _deleted = slot_builder(FreeHost), slot_builder(Deleted)
_backup_node = slot_builder(BackupNode)


@dataclass
class EvictResult:
    actions: list[Action] = field(default_factory=list)
    freed: dict[Kind, int] = field(default_factory=dict)  # pool -> pages (MAMBA: slots)
    backing_up: int = 0  # FULL pages of write_back victims: freed once their copy lands

    def add_free(self, action: FreeDevice | FreeHost) -> None:
        self.actions.append(action)
        pool = action.extent.pool
        self.freed[pool] = self.freed.get(pool, 0) + action.extent.num_pages


class Residency:
    def __init__(self, tree: UnifiedRadixTree, key: KeyFn, *, session_aware: bool = False,
                 options: TreeOptions = SGLANG, session_coverage: str = "path") -> None:
        if session_coverage not in COVERAGES:
            raise ValueError(f"session_coverage: {session_coverage!r} is not one of "
                             f"{', '.join(COVERAGES)}")
        self.tree = tree
        self.options = options
        self.session_aware = session_aware
        self.component_coverage = session_aware and session_coverage == "component"
        self.device_heap = LazyHeap(key)
        self.host_heap = LazyHeap(key)
        self.lru: dict[Kind, LruList] = {
            k: LruList() for k in (_SWA, _MAMBA) if tree.spec.get(k)}
        self.host_enabled = False
        self.write_back = False
        self.held: dict[tuple[Tier, Kind], int] = {}  # (tier, pool) -> pages held
        self._jobs: dict[int, list[Node]] = {}  # job id -> nodes covering the backed-up span
        self._job_of: dict[int, int] = {}  # node id -> job id
        self._job_kinds: dict[int, frozenset[Kind]] = {}  # job id -> components copied

    # -- hooks from the tree -----------------------------------------------------------
    def touched(self, node: Node) -> None:
        """The node's eviction key or eligibility may have changed: re-queue it. (Recency
        is the tree's ``last_access`` stamp and the refreshes below, not this.)

        The stamp bump makes every older entry of the node stale. A leaf that holds a lock
        its heap's evictor refuses (a device lock for L1: FULL, SWA or MAMBA; the host
        lock for L2) gets no new entry: such an entry could never be yielded, because
        :meth:`LockTable.unlock` touches the node again (a new stamp, a new entry) when
        its last such lock goes, before anything can evict it. Until then an entry would
        only be popped and dropped (:meth:`LazyHeap.pop_valid`) or skipped
        (:meth:`LazyHeap.drop_all_unless`), and entry order is by (key, last access,
        push sequence), so the entries pushed keep their order: every eviction and every
        answer of the heaps stays the same, with fewer entries to push and pop."""
        node.stamp += 1
        self.tree.changes += 1
        if _FULL in node.device:  # on_device and is_device_leaf, in line (hot)
            for c in node.children.values():
                if _FULL in c.device:
                    return
            locks = node.locks  # a key is present only while its count is > 0
            if locks and (len(locks) > 1 or HOST not in locks):
                return  # device-locked (any_device_lock, in line): the unlock pushes
            self.device_heap.push(node)
        elif _FULL in node.host and not node.children:  # on_host
            if HOST not in node.locks:  # host-locked: the unlock pushes
                self.host_heap.push(node)

    added = touched
    unlocked = touched

    def refresh_after_match(self, node: Node) -> None:
        """SGLang's MATCH_END refresh: the SWA window ending at ``node``; MAMBA ``node``."""
        self._refresh_window(node)
        mamba = self.lru.get(_MAMBA)
        if mamba is not None and _MAMBA in node.device:
            mamba.push_mru(node)

    def refresh_after_insert(self, node: Node) -> None:
        """SGLang's INSERT_END refresh: the SWA window ending at ``node`` (a new MAMBA
        checkpoint entered its list when it was stored)."""
        self._refresh_window(node)

    def refresh_mamba(self, node: Node) -> None:
        """An insert ended on a node that already has its checkpoint: it was used."""
        mamba = self.lru.get(_MAMBA)
        if mamba is not None and _MAMBA in node.device:
            mamba.push_mru(node)

    def _refresh_window(self, node: Node) -> None:
        """Make ``node`` and its ancestors within one window plus a page the most recent
        SWA holders, the deepest first (nodes without live SWA keep their place)."""
        lru = self.lru.get(_SWA)
        if lru is None:
            return
        spec = self.tree.spec
        comp = spec.get(_SWA)
        assert comp is not None
        span = comp.window + spec.page_size
        chain: list[Node] = []
        covered = 0
        n: Node | None = node
        while n is not None and n is not self.tree.root and covered < span:
            if _SWA in n.device:
                chain.append(n)
            covered += n.num_pages * spec.page_size
            n = n.parent
        for n in reversed(chain):
            lru.push_mru(n)

    # -- the only places values enter or leave nodes (keeps ``held`` exact) -----------
    def put_value(self, node: Node, tier: Tier, kind: Kind, ext: CacheExtentRef) -> None:
        """Store data (a new SWA/MAMBA holder on L1 becomes its list's most recent)."""
        device = tier is _DEVICE
        values = node.device if device else node.host
        if kind in values:  # replacing a copy would leak its pages and ``held``
            raise ValueError(f"{node} holds {kind.value} on {tier.value} already")
        values[kind] = ext
        self.tree.changes += 1
        self.tree.shape += 1
        key = (tier, ext.pool)
        self.held[key] = self.held.get(key, 0) + ext.num_pages
        if device and kind in self.lru:
            self.lru[kind].push_mru(node)

    def pop_value(self, node: Node, tier: Tier, kind: Kind) -> CacheExtentRef:
        device = tier is _DEVICE
        ext: CacheExtentRef = (node.device if device else node.host).pop(kind)
        self.tree.changes += 1
        self.tree.shape += 1
        self.held[(tier, ext.pool)] -= ext.num_pages
        if device and kind in self.lru:
            self.lru[kind].discard(node)
        return ext

    def held_pages(self, tier: Tier, kind: Kind = _FULL) -> int:
        return self.held.get((tier, kind), 0)

    def holds(self, tier: Tier) -> bool:
        """Does any node hold data (of any component) on ``tier``?"""
        return any(n for (t, _), n in self.held.items() if t is tier)

    def sizes(self, kind: Kind) -> tuple[int, int]:
        """(evictable, protected) L1 pages of ``kind`` (MAMBA: slots): held unlocked and
        held locked, SGLang's ``component_evictable_size``/``component_protected_size``.
        A scan of the tree, for tests and reports."""
        evictable = protected = 0
        for n in self.tree.nodes.values():
            ext = n.device.get(kind)
            if ext is not None:
                if n.locked(kind):
                    protected += ext.num_pages
                else:
                    evictable += ext.num_pages
        return evictable, protected

    def on_split(self, tail: Node, head: Node) -> None:
        """The new upper part sits just behind the lower part in each list it joins."""
        for kind, lru in self.lru.items():
            if kind in head.device:
                lru.insert_after(tail, head)
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
        self.tree.changes += 1
        self._jobs[node.id] = [node]
        self._job_of[node.id] = node.id
        self._job_kinds[node.id] = frozenset(node.device)
        return _backup_node(node.id, tuple(node.device.items()),
                            node.num_pages * self.tree.spec.page_size)

    def complete_backup(self, job_id: int, host: dict[Kind, CacheExtentRef]) -> list[Node]:
        """The L2 copy of backup ``job_id`` exists at ``host`` (extents over the whole
        original span); spread it over the nodes the span was split into."""
        nodes = self._jobs.pop(job_id)
        self.tree.changes += 1
        del self._job_kinds[job_id]
        offset = 0
        for i, node in enumerate(nodes):
            del self._job_of[node.id]
            for kind, ext in host.items():
                if kind is _MAMBA:
                    if i == len(nodes) - 1 and kind not in node.host:
                        self.put_value(node, _HOST, kind, ext)
                elif kind not in node.host:
                    self.put_value(node, _HOST, kind,
                                   ext.slice(offset, offset + node.num_pages))
            offset += node.num_pages
            node.backing_up = False
            self.touched(node)
        return nodes

    def abort_backup(self, job_id: int) -> None:
        self.tree.changes += 1
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
        return kind is not _MAMBA or self._jobs[job][-1] is node

    def backing_up(self) -> int:
        return len(self._jobs)

    def narrow_backup(self, job_id: int, kinds: frozenset[Kind]) -> None:
        """Backup ``job_id`` copies only ``kinds`` (the others found no L2 room)."""
        self._job_kinds[job_id] = kinds
        self.tree.changes += 1

    # -- eviction --------------------------------------------------------------------
    def device_evictable(self, n: Node) -> bool:
        return (n.parent is not None and n.is_device_leaf() and not n.any_device_lock()
                and not n.backing_up)

    def evict_device(self, kind: Kind, pages: int) -> EvictResult:
        """Free at least ``pages`` L1 pages of ``kind``'s pool if possible, and no more
        nodes than needed: the walk stops once enough is freed."""
        res = EvictResult()
        pool = kind
        if pages <= 0:
            return res
        if kind is _FULL:
            skipped = []  # popped but kept (an L2 child is pinned): they stay candidates
            for node in self.device_heap.pop_valid(self.device_evictable):
                self._evict_leaf(node, res)
                if self.device_evictable(node):
                    skipped.append(node)
                if res.freed.get(pool, 0) + res.backing_up >= pages:
                    break
            for node in skipped:
                self.device_heap.push(node)
            return res
        for node in self._lru_walk(kind):
            self._evict_component(node, kind, res)
            if res.freed.get(pool, 0) >= pages:
                break
        return res

    def device_refusal(self, end: Node | None) -> bool:
        """Would :meth:`evict_device` of FULL pages (any number > 0), run while one more
        FULL lock holds ``end``'s path to the root (an admission's lock of the prefix it
        reuses; ``end``: that prefix's last L1 node, whose touch just pushed it), free
        nothing and start nothing? If so, leave the L1 heap as that eviction and the
        unlock after it would (every entry popped; ``end`` pushed again by the unlock if
        that lock was its only one) and return True; else change nothing, return False.

        Exact because that eviction's walk pops every entry and yields only live,
        evictable ones: ``end``, the one node of the locked path that can be a device
        leaf, is locked then; the other locked nodes have an L1 child or no L1 data.
        The caller makes sure no backup is under way for eviction (no write_back)."""
        keep = end if end is not None and not end.locks.get(_FULL) else None
        return self.device_heap.drop_all_unless(self.device_evictable, end, keep)

    def _aux_evictable(self, n: Node, kind: Kind) -> bool:
        return (n.parent is not None and kind in n.device and not n.locked(kind)
                and not n.backing_up)

    def _lru_walk(self, kind: Kind) -> Iterator[Node]:
        """Unlocked holders of ``kind`` from the LRU end; with session-aware eviction the
        unreferenced ones first. Each step reads its successor before the caller evicts
        the node, and restarts from the LRU end if that successor left the list."""
        lru = self.lru[kind]
        passes: tuple[bool | None, ...] = (False, True) if self.session_aware else (None,)
        cover = covered(self.tree, kind) if self.component_coverage else None
        for referenced in passes:
            node = lru.lru()
            while node is not None:
                nxt = lru.newer(node)
                if self._aux_evictable(node, kind) and (
                        referenced is None or self._referenced(node, cover) == referenced):
                    yield node
                    if nxt is not None and nxt not in lru:
                        nxt = lru.lru()
                node = nxt

    def _referenced(self, node: Node, cover: set[int] | None) -> bool:
        """Does a live session reference ``node``'s component (``cover``: SGLang's rule,
        :mod:`hicache.tree.session_coverage`; None: any reference on the node)?"""
        if cover is None:
            return bool(node.sessions)
        return node.id in cover or (bool(node.sessions) and self.device_evictable(node))

    def _evict_component(self, node: Node, kind: Kind, res: EvictResult) -> None:
        if self.device_evictable(node):
            self._evict_leaf(node, res)
        else:
            self._tombstone(node, kind, res)

    def _tombstone(self, node: Node, kind: Kind, res: EvictResult) -> None:
        """Drop ``kind`` from an internal node; SWA takes MAMBA along (without a live
        window ending here the checkpoint cannot serve reuse: SGLang's priorities)."""
        res.add_free(FreeDevice(node.id, kind, self.pop_value(node, _DEVICE, kind)))
        if kind is _SWA and _MAMBA in node.device and not node.locked(_MAMBA):
            res.add_free(FreeDevice(node.id, _MAMBA,
                                    self.pop_value(node, _DEVICE, _MAMBA)))

    def _drop_device(self, node: Node, res: EvictResult) -> None:
        for kind in list(node.device):
            res.add_free(_free_device(node.id, kind, self.pop_value(node, _DEVICE, kind)))

    def _evict_leaf(self, node: Node, res: EvictResult) -> None:
        """Evict a device leaf; with ``free_swa_tombstone_leaves`` a parent left as an
        evictable device leaf with an SWA tombstone goes too, iteratively."""
        nxt: Node | None = node
        while nxt is not None:
            nxt = self._evict_one_leaf(nxt, res)

    def _swa_tombstone_leaf(self, n: Node) -> bool:
        return (self.options.free_swa_tombstone_leaves and _SWA in self.lru
                and _SWA not in n.device and self.device_evictable(n))

    def _evict_one_leaf(self, node: Node, res: EvictResult) -> Node | None:
        tokens = node.num_pages * self.tree.spec.page_size
        parent = node.parent
        if self.host_enabled and node.on_host:
            self._drop_device(node, res)
            res.actions.append(_demoted(node.id, tokens))
            self.touched(node)
        elif self.host_enabled and self.write_back:
            res.actions.append(self.begin_backup(node))
            res.backing_up += node.device[_FULL].num_pages
            return None
        else:
            subtree = self._subtree(node)
            if any(n.locked(HOST) or n.backing_up for n in subtree):
                return None
            for n in reversed(subtree):
                self._drop_device(n, res)
                for kind in list(n.host):
                    res.add_free(FreeHost(n.id, kind, self.pop_value(n, _HOST, kind)))
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

    def host_evictable(self, n: Node) -> bool:
        return (n.parent is not None and not n.on_device and n.on_host and not n.children
                and not n.locked(HOST) and not n.backing_up)

    def evict_host_component(self, kind: Kind, pages: int) -> EvictResult:
        """Free at least ``pages`` L2 pages (MAMBA: slots) of ``kind`` (SWA or MAMBA) by
        dropping that component's L2 copies, the node and its FULL copy staying: first
        copies whose data is on L1 too (redundant now: SGLang's coexistence reclaim), then
        the least recently used. Copies pinned (a load or store reads them) or being
        written stay. An SWA copy takes the node's MAMBA copy along (no window ends there
        any more, so the checkpoint serves no reuse), as on L1."""
        res = EvictResult()
        if pages <= 0 or kind is _FULL:
            return res
        held = [n for n in self.tree.nodes.values()
                if kind in n.host and not n.locked(HOST) and not n.backing_up]
        held.sort(key=lambda n: (kind not in n.device, n.last_access, n.id))
        for node in held:
            res.add_free(FreeHost(node.id, kind, self.pop_value(node, _HOST, kind)))
            if kind is _SWA and _MAMBA in node.host:
                res.add_free(FreeHost(node.id, _MAMBA,
                                      self.pop_value(node, _HOST, _MAMBA)))
            if res.freed.get(kind, 0) >= pages:
                break
        return res

    def evict_host(self, pages: int) -> EvictResult:
        """Free at least ``pages`` L2 FULL pages by deleting host-only leaves."""
        res = EvictResult()
        for node in self.host_heap.pop_valid(self.host_evictable):
            parent = node.parent
            for kind in list(node.host):
                res.add_free(_free_host(node.id, kind, self.pop_value(node, _HOST, kind)))
            self.tree.remove(node)
            res.actions.append(_deleted(node.id, node.num_pages * self.tree.spec.page_size))
            if parent is not None and parent is not self.tree.root:
                self.touched(parent)
            if res.freed.get(_FULL, 0) >= pages:
                break
        return res
