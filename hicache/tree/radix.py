"""UnifiedRadixTree: one radix tree over token ids at page granularity, all components.

    root ── [p0 p1 p2] ── [p3 p4] ── [p5]        each node: a page span + per-component
                     └──── [q3]                   data per tier (see node.py)

The tree decides and returns frozen actions (actions.py); it owns no memory. Callers own
allocators (or a runtime owns placement) and execute the actions. Every decision is the
one SGLang 0.5.23's ``UnifiedRadixCache`` makes on the same operations (``tests/oracle``
replays SGLang's recorded results); options.py names the deliberate departures.

Recency is a logical clock owned by the tree (one tick per stamp, so a run is
reproducible): a match stamps the reused path from the root down, an insert every node it
walks and creates, a split both parts (upper first).

Split rule: a node is split where a match or insert diverges inside it; where an insert's
component data starts inside a node that lacks that component (an SWA suffix over an SWA
tombstone); and a new leaf's SWA part longer than one window is cut so that its last
window is a node of its own (locking it then pins one window, SGLang's SWA lock split).
Locks, eviction and sessions live in their own modules and operate on this structure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.slot_init import slot_builder, slot_init
from hicache.tree.actions import Action, FreeDevice, FreeHost
from hicache.tree.boundary import on_device, on_device_or_host, safe_boundary
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.eviction import strategy
from hicache.tree.locks import LockTable
from hicache.tree.node import Node, PageKey
from hicache.tree.options import SGLANG, TreeOptions
from hicache.tree.pagekeys import page_keys
from hicache.tree.residency import Residency

_FULL, _SWA, _MAMBA = Kind.FULL, Kind.SWA, Kind.MAMBA  # hot: Enum reads (ARCHITECTURE.md)
_DEVICE, _HOST = Tier.DEVICE, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)

__all__ = ["InsertResult", "MatchResult", "UnifiedRadixTree", "page_keys"]


@slot_init
@dataclass(frozen=True, slots=True)
class MatchResult:
    """``device_tokens``: reusable now from L1; ``host_tokens``: reusable after loading the
    L2 tail; ``matched_pages``: structural match length (any tier, any component)."""

    device_tokens: int
    host_tokens: int
    matched_pages: int
    path: tuple[Node, ...]  # matched nodes, root excluded, up to the L1+L2 boundary
    device_nodes: int  # path[:device_nodes] end at the L1 boundary

    @property
    def total_tokens(self) -> int:
        return self.device_tokens + self.host_tokens

    @property
    def last_node(self) -> Node | None:
        return self.path[-1] if self.path else None

    @property
    def device_node(self) -> Node | None:
        return self.path[self.device_nodes - 1] if self.device_nodes else None

    @property
    def host_tail(self) -> tuple[Node, ...]:
        return self.path[self.device_nodes:]


@slot_init
@dataclass(frozen=True, slots=True)
class InsertResult:
    """``existing_pages``: pages that were already cached in that tier before the insert;
    ``actions``: frees of the caller's duplicate pages; ``node``: the last node."""

    existing_pages: int
    node: Node | None
    actions: tuple[Action, ...]


# built per walk and per insert: at slot speed (slot_builder; ARCHITECTURE.md)
_match_result, _insert_result = slot_builder(MatchResult), slot_builder(InsertResult)


class UnifiedRadixTree:
    def __init__(self, spec: TreeSpec, *, eviction_policy: str = "lru",
                 session_aware: bool = False, options: TreeOptions = SGLANG,
                 session_coverage: str = "path") -> None:
        self.spec = spec
        self.options = options
        self.clock = 0
        # bumped by every change a match, a lock or an eviction could see (stamps, new and
        # removed nodes, values in and out, locks, backups, re-queues): equal counts, same tree
        self.changes = 0
        # bumped only by what a read-only match reads (nodes in and out, splits, values in
        # and out): equal shapes, same walk and boundaries whatever was stamped or locked
        self.shape = 0
        self._walks: dict[int, tuple[Sequence[PageKey], int, MatchResult]] = {}  # see match
        self._walks_shape = 0
        self._next_id = 1
        self.root = Node(0, None, [], 0)
        self.nodes: dict[int, Node] = {}
        self.locks = LockTable(self)
        self.residency = Residency(self, strategy(eviction_policy, session_aware=session_aware),
                                   session_aware=session_aware, options=options,
                                   session_coverage=session_coverage)
        self.sessions: dict[str, set[Node]] = {}
        self.frontiers: dict[str, Node] = {}  # session -> its last finished request's node
        self.session_leaves: dict[str, set[Node]] = {}  # session -> the ends of its paths
        swa = spec.get(_SWA)
        self._window_pages = -(-swa.window // spec.page_size) if swa is not None else 0
        # FULL alone: a node ends a safe boundary iff it and every node above hold FULL
        self._full_only = swa is None and spec.get(_MAMBA) is None

    @property
    def window_pages(self) -> int:
        """The SWA window in pages (0 without an SWA component)."""
        return self._window_pages

    # -- structure -------------------------------------------------------------------
    def _tick(self) -> int:
        self.clock += 1
        self.changes += 1
        return self.clock

    def _stamp(self, node: Node) -> None:
        """``node`` was used now (its FULL eviction key changes: re-queue it)."""
        node.last_access = self._tick()
        self.residency.touched(node)

    def _new_node(self, parent: Node, key: list) -> Node:
        node = Node(self._next_id, parent, key, self._tick())
        self._next_id += 1
        self.shape += 1
        parent.children[key[0]] = node
        self.nodes[node.id] = node
        return node

    def split(self, node: Node, at: int) -> Node:
        """Split ``node`` after ``at`` pages; return the new upper node (``node`` keeps
        the tail, its children and its MAMBA checkpoint). Both parts count as just used,
        the upper one first; in the SWA list the upper part goes just behind ``node``."""
        if not 0 < at < node.num_pages:
            raise ValueError(f"split of {node} at {at}")
        parent = node.parent
        assert parent is not None
        head = Node(self._next_id, parent, node.key[:at], self._tick())
        self._next_id += 1
        self.shape += 1
        self.nodes[head.id] = head
        head.created, head.hit_count, head.priority = node.created, node.hit_count, node.priority
        node.last_access = self._tick()
        node.key = node.key[at:]
        parent.children[head.key[0]] = head
        head.children[node.key[0]] = node
        node.parent = head
        for tier_values in ("device", "host"):
            values: dict = getattr(node, tier_values)
            head_values: dict = getattr(head, tier_values)
            for kind in list(values):
                if kind is _MAMBA:
                    continue
                head_values[kind], values[kind] = values[kind].split(at)
        head.backing_up = node.backing_up
        head.sessions = dict(node.sessions)
        for sid in head.sessions:
            self.sessions[sid].add(head)
        self.locks.on_split(node, head)
        self.residency.on_split(node, head)
        self.residency.touched(head)
        self.residency.touched(node)
        return head

    def _walk(self, pages: Sequence[PageKey], starts: dict[Kind, int] | None = None,
              attr: str = "device") -> Iterator[tuple[Node, int]]:
        """Follow ``pages`` from the root, splitting where the match diverges inside a node,
        and where a component's data starts (``starts``: page index) inside a node that
        lacks that component in ``attr``; yield (node, start page) per matched node."""
        node, i, n = self.root, 0, len(pages)
        while i < n:
            child = node.children.get(pages[i])
            if child is None:
                return
            key = child.key
            limit = min(len(key), n - i)
            if key[1:limit] == pages[i + 1:i + limit]:  # one C-level compare per node
                m = limit
            else:
                m = 1
                while key[m] == pages[i + m]:
                    m += 1
            if starts:
                held = getattr(child, attr)
                for k, c in starts.items():  # cut at the first start inside, if any
                    if i < c < i + m and k not in held:
                        m = c - i
            if m < len(key):
                child = self.split(child, m)
            yield child, i
            i += m
            node = child

    # -- match -----------------------------------------------------------------------
    def match(self, pages: Sequence[PageKey], *, touch: bool = True,
              memo: bool = False) -> MatchResult:
        """Longest cached prefix of ``pages`` with the L1 and L1+L2 reuse boundaries.

        ``memo``: ``pages`` is a list its owner never mutates (a request's page keys); a
        repeat while :attr:`shape` is unchanged reuses the last walk of that very list.
        That is exact: the first walk made every split the pages need (a repeat splits
        nothing) and the result reads only what bumps ``shape``. ``touch`` still stamps."""
        if memo:
            if self._walks_shape != self.shape:
                self._walks.clear()
                self._walks_shape = self.shape
            hit = self._walks.get(id(pages))
            if hit is not None and hit[0] is pages and hit[1] == len(pages):
                result = hit[2]
            else:
                result = self._read(pages)
                if self._walks_shape != self.shape:  # the walk split a node
                    self._walks.clear()
                    self._walks_shape = self.shape
                self._walks[id(pages)] = (pages, len(pages), result)  # holds pages: id kept
        else:
            result = self._read(pages)
        path = result.path
        if touch and path:
            touched = self.residency.touched
            for node in path:  # the reused path, the deepest node the most recent
                self.clock += 1  # _stamp, in line: a tick, then the re-queue
                self.changes += 1
                node.last_access = self.clock
                touched(node)
            self.residency.refresh_after_match(path[-1])
        return result

    def reusable_tokens(self, pages: Sequence[PageKey]) -> int:
        """``match(pages, touch=False, memo=True).total_tokens``: the L1+L2 reusable
        tokens, for a router that needs only that length.

        Exact: the walk makes the very splits :meth:`_read` makes (same nodes, clock and
        shape) and stamps nothing. A FULL-only tree counts the pages of the nodes from the
        root that hold FULL on L1 or L2, which is :meth:`_read`'s L1+L2 boundary (where no
        node holds L2 data it is the L1 one); it builds no path, no result and no memo
        entry (a later memo match reads afresh, as after any walk that changed nothing).
        Other trees take :meth:`match`."""
        if not self._full_only:
            return self.match(pages, touch=False, memo=True).total_tokens
        full = _FULL
        held = 0  # pages of the nodes from the root holding FULL on L1 or L2
        walk = self._walk(pages)  # each node it yields is cut to the pages it matched
        for child, i in walk:
            if full not in child.device and full not in child.host:
                deque(walk, maxlen=0)  # the rest of the walk: its splits still happen
                break
            held = i + len(child.key)
        return held * self.spec.page_size

    def _read(self, pages: Sequence[PageKey]) -> MatchResult:
        """The match of ``pages`` (splitting where it diverges inside a node), unstamped.

        A FULL-only tree reads both boundaries in the walk's own loop: the L1 one ends at
        the first node without FULL on L1, the L1+L2 one at the first without FULL on
        either tier (:meth:`_boundaries`' answer: while L2 holds nothing, no node holds
        FULL there and the two agree)."""
        if not self._full_only:
            return self._read_components(pages)
        full = _FULL
        path: list[Node] = []
        add = path.append
        end = dev_pages = dev_nodes = all_pages = all_nodes = 0
        dev_open = all_open = True  # no node without FULL on L1 (on either tier) yet
        for node, start in self._walk(pages):
            add(node)
            end = start + len(node.key)  # pages up to the end of ``node``
            if all_open:
                if full in node.device:
                    if dev_open:
                        dev_pages, dev_nodes = end, dev_nodes + 1
                elif full in node.host:
                    dev_open = False
                else:
                    all_open = dev_open = False
                    continue
                all_pages, all_nodes = end, all_nodes + 1
        page = self.spec.page_size
        return _match_result(dev_pages * page, (all_pages - dev_pages) * page, end,
                              tuple(path[:all_nodes]), dev_nodes)

    def _read_components(self, pages: Sequence[PageKey]) -> MatchResult:
        """:meth:`_read` of a tree with SWA or MAMBA: each boundary by
        :func:`safe_boundary` over the walked path."""
        path = [node for node, _ in self._walk(pages)]
        matched = sum(n.num_pages for n in path)
        dev_tokens, dev_nodes, all_tokens, all_nodes = self._boundaries(path)
        return MatchResult(dev_tokens, all_tokens - dev_tokens, matched,
                           tuple(path[:all_nodes]), dev_nodes)

    def _boundaries(self, path: list[Node]) -> tuple[int, int, int, int]:
        """(tokens, nodes) of ``path``'s L1 safe boundary, then of its L1+L2 one (the L1
        one while L2 holds nothing, or where a host-tier hole would shorten it)."""
        dev_tokens, dev_nodes = safe_boundary(path, self.spec, on_device)
        if self.residency.holds(_HOST):
            all_tokens, all_nodes = safe_boundary(path, self.spec, on_device_or_host)
            if all_tokens >= dev_tokens:  # a host-tier hole cannot shorten the L1 boundary
                return dev_tokens, dev_nodes, all_tokens, all_nodes
        return dev_tokens, dev_nodes, dev_tokens, dev_nodes

    # -- insert ----------------------------------------------------------------------
    def insert(self, pages: Sequence[PageKey], values: dict[Kind, CacheExtentRef], *,
               tier: Tier = _DEVICE, inserted: int = 0) -> InsertResult:
        """Cache ``pages`` with their data in ``tier``.

        Each paged extent covers the *last* ``num_pages`` pages. ``values[FULL]`` may skip
        a prefix only if the tree already holds that prefix (in any tier), and may be left
        out when it holds every page (a request that computed nothing new: the insert only
        walks, counting its hits as SGLang's insert of a cached key does); ``values[SWA]``
        may be shorter still (earlier nodes keep SWA tombstones); ``values[MAMBA]`` is the
        checkpoint at the end. Pages the tree already holds in that tier are
        duplicates: their caller-side copies are returned as free actions (unless they
        are the very same pages, as when a request re-inserts a prefix it borrowed).

        An L1 insert counts a hit on every L1 node it walks and on its new leaf that ends
        past ``inserted``, the pages the inserting request inserted before: a request
        counts each node once, as SGLang's insert does with ``inserted_len``
        (``Node.hit_count``: what LFU/SLRU and write-through thresholds read; SGLang
        counts none under write_back); a match counts none.
        """
        n = len(pages)
        if n == 0:
            return InsertResult(0, None, ())
        full = values.get(_FULL)
        if full is not None and not 0 < full.num_pages <= n:
            raise ValueError(f"insert needs a FULL extent of 1..{n} pages, got "
                             f"{full.num_pages}")
        for kind in values:
            if self.spec.get(kind) is None:
                raise ValueError(f"insert of component {kind.value!r} the tree does not have")
        starts = {k: n - e.num_pages for k, e in values.items() if k is not _MAMBA}
        for k, s in starts.items():
            if s < 0:
                raise ValueError(f"{k.value} extent longer than the inserted pages")
        attr = "device" if tier is _DEVICE else "host"
        res = self.residency
        hits = tier is _DEVICE and not (res.host_enabled and res.write_back)
        actions: list[Action] = []
        existing = 0
        node, i = self.root, 0  # i: pages covered by the nodes walked so far
        # a node ending by the first page any extent reaches gets none of them (_fill
        # would do nothing): the walk over a cached prefix skips the call
        reach, fill, touched = min(starts.values(), default=n), self._fill, res.touched
        full_kind = _FULL  # a local: an Enum class's attribute is a slow read
        for node, start in self._walk(pages, starts, attr):
            i = start + len(node.key)  # num_pages
            if full_kind in getattr(node, attr):
                existing = i
            if i > reach:
                fill(node, attr, values, starts, start, i, actions)
            if hits and full_kind in node.device and i > inserted:  # on_device
                node.hit_count += 1
            self.clock += 1  # _stamp, in line: a tick, then the re-queue
            self.changes += 1
            node.last_access = self.clock
            touched(node)
        if i < starts.get(_FULL, n):
            raise ValueError(f"insert of a FULL suffix from page {starts.get(Kind.FULL, n)}: "
                             f"the tree holds only the first {i} pages of its prefix")
        walked_to = node
        for a, b in self._new_spans(i, n, starts):
            node = self._new_node(node, list(pages[a:b]))
            self._fill(node, attr, values, starts, a, b, actions)
            if hits and b == n and b > inserted:  # the new leaf (not the parts cut above)
                node.hit_count = 1
            self.residency.added(node)
        mamba = values.get(_MAMBA)
        if mamba is not None:
            self._put_checkpoint(node, attr, mamba, node is walked_to, actions)
        if attr == "device" and node is not self.root:
            self.residency.refresh_after_insert(node)
        return _insert_result(existing, node, tuple(actions))

    def _new_spans(self, i: int, n: int, starts: dict[Kind, int]) -> list[tuple[int, int]]:
        """Page spans of the nodes an insert creates for pages ``i:n``: cut where a
        component's data starts and, when the SWA part is longer than one window, where
        its last window starts (SGLang's cap of a fresh SWA leaf)."""
        cuts = {s for s in starts.values() if i < s < n}
        swa = starts.get(_SWA)
        if swa is not None and n - max(swa, i) > self._window_pages:
            cuts.add(n - self._window_pages)
        if not cuts:  # the usual insert: one new node
            return [(i, n)] if i < n else []
        bounds = [i, *sorted(cuts), n]
        return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]

    def _fill(self, node: Node, attr: str, values: dict[Kind, CacheExtentRef],
              starts: dict[Kind, int], i: int, end: int, actions: list[Action]) -> None:
        """Give pages ``i:end`` (``node``) their part of each extent that reaches them."""
        for kind, start in starts.items():
            if start < end:
                ext = values[kind].slice(max(start, i) - start, end - start)
                self._put(node, attr, kind, ext, actions, offset=max(start - i, 0))

    def _put(self, node: Node, attr: str, kind: Kind, ext: CacheExtentRef,
             actions: list[Action], offset: int = 0) -> None:
        """Store ``ext`` as ``node``'s ``kind`` data (from page ``offset`` of the node);
        if the node has it already, the caller's copy is a duplicate to free (unless it is
        the very same pages)."""
        held: dict[Kind, CacheExtentRef] = getattr(node, attr)
        current = held.get(kind)
        if current is None and attr == "host" and self.residency.backup_covers(node, kind):
            actions.append(FreeHost(node.id, kind, ext))  # the in-flight backup brings it
        elif current is None:
            assert offset == 0, "a node lacking a component is cut where its data starts"
            self.residency.put_value(node, _DEVICE if attr == "device" else _HOST,
                                     kind, ext)
        else:
            mine = current if offset == 0 and ext.num_pages == current.num_pages else \
                current.slice(offset, offset + ext.num_pages)
            if list(mine.pages()) != list(ext.pages()):
                free = FreeDevice if attr == "device" else FreeHost
                actions.append(free(node.id, kind, ext))

    def _put_checkpoint(self, node: Node, attr: str, ext: CacheExtentRef, existed: bool,
                        actions: list[Action]) -> None:
        """The MAMBA checkpoint at the end of an insert. On L1 a node that already held
        one counts it as used (its copy is freed); an existing node is stamped used."""
        had = _MAMBA in getattr(node, attr)
        self._put(node, attr, _MAMBA, ext, actions)
        if attr == "device" and had:
            self.residency.refresh_mamba(node)
        if existed:
            self._stamp(node)

    # -- queries ---------------------------------------------------------------------
    def path_to_root(self, node: Node) -> Iterator[Node]:
        while node is not self.root and node is not None:
            yield node
            node = node.parent  # type: ignore[assignment]

    def device_path(self, node: Node) -> tuple[Node, ...]:
        """The L1 part of the path from the root to ``node``: for pages whose walk ends
        exactly at ``node`` (the last node of their insert), ``match(pages).path[:
        device_nodes]``, found by parent links instead of a key walk (a walk after the
        insert splits nothing and a match with ``touch=False`` stamps nothing)."""
        path = self._root_path(node)
        return tuple(path[:safe_boundary(path, self.spec, on_device)[1]])

    def reuse_path(self, node: Node) -> tuple[Node, ...]:
        """``match(pages, touch=False).path`` (the L1+L2 part, as :meth:`_read` cuts it)
        for pages whose walk ends exactly at ``node`` (the last node of their insert),
        found by parent links instead of a key walk, as :meth:`device_path` is."""
        path = self._root_path(node)
        return tuple(path[:self._boundaries(path)[3]])

    def _root_path(self, node: Node) -> list[Node]:
        """The nodes from the root's child down to ``node`` (:meth:`path_to_root`,
        reversed, in line: admissions and prefetches ask it)."""
        path = []
        root, n = self.root, node
        while n is not root and n is not None:
            path.append(n)
            n = n.parent
        path.reverse()
        return path

    def pages_in(self, tier: Tier, kind: Kind = _FULL) -> int:
        attr = "device" if tier is _DEVICE else "host"
        return sum(getattr(n, attr)[kind].num_pages for n in self.nodes.values()
                   if kind in getattr(n, attr))

    def tokens_before(self, node: Node) -> int:
        """Tokens from the root to the end of ``node``."""
        return sum(n.num_pages for n in self.path_to_root(node)) * self.spec.page_size

    def page_span(self, node: Node) -> tuple[int, int]:
        """(first page index, page count) of ``node`` counted from the root."""
        end = sum(n.num_pages for n in self.path_to_root(node))
        return end - node.num_pages, node.num_pages

    def remove(self, node: Node) -> None:
        """Detach a childless node (called by residency once its data is gone)."""
        assert not node.children and node is not self.root
        parent = node.parent
        assert parent is not None
        del parent.children[node.key[0]]
        del self.nodes[node.id]
        self.changes += 1
        self.shape += 1
        for sid in node.sessions:
            self.sessions[sid].discard(node)
            if self.frontiers.get(sid) is node:  # SGLang: the frontier falls back
                if parent is self.root:
                    del self.frontiers[sid]
                else:
                    self.frontiers[sid] = parent
            self._recede(sid, node, parent)
        node.parent = None
        node.stamp += 1

    # -- sessions --------------------------------------------------------------------
    def reference_session(self, session_id: str, node: Node | None) -> None:
        """A finished request of ``session_id`` references its path (``node`` to root).

        Counted as SGLang's FULL component counts (PR 29173): a node holds one reference
        per end of the session's paths below it. A path that continues the session's
        last one moves that end forward (the nodes it adds get 1); a path that forks off
        (the next prompt does not carry the last output) is one more end, so the shared
        trunk gains a reference and the abandoned branch keeps its 1 until close::

            root ── trunk(2) ─┬─ old branch(1)     ends: {old branch, new}
                              └─ new(1)
        """
        held = self.sessions.setdefault(session_id, set())
        if node is None or node is self.root:
            return
        self.frontiers[session_id] = node
        ends = self.session_leaves.setdefault(session_id, set())
        if node in ends:
            return
        stop = next((a for a in self.path_to_root(node.parent) if a in ends), None)
        for n in self.path_to_root(node):
            if n is stop:
                break
            n.sessions[session_id] = n.sessions.get(session_id, 0) + 1
            held.add(n)
            self.residency.touched(n)
        ends.add(node)
        ends.discard(stop)  # type: ignore[arg-type]

    def _recede(self, session_id: str, node: Node, parent: Node) -> None:
        """``node``, an end of ``session_id``'s paths, is gone: its parent becomes the end
        (SGLang's fallback), or, if the parent is the root or already an end, the
        reference that end carried up to the root goes."""
        ends = self.session_leaves.get(session_id)
        if ends is None or node not in ends:
            return
        ends.discard(node)
        if parent is not self.root and parent not in ends:
            ends.add(parent)
            return
        for n in self.path_to_root(parent):
            n.sessions[session_id] -= 1
            if not n.sessions[session_id]:
                del n.sessions[session_id]
                self.sessions[session_id].discard(n)
            self.residency.touched(n)

    def close_session(self, session_id: str) -> int:
        """Drop every reference of ``session_id``; return how many nodes it held."""
        nodes = self.sessions.pop(session_id, set())
        self.frontiers.pop(session_id, None)
        self.session_leaves.pop(session_id, None)
        # a set of nodes iterates in memory order: re-queue them in a reproducible order
        for n in sorted(nodes, key=lambda n: (n.last_access, n.id)):
            n.sessions.pop(session_id, None)
            self.residency.touched(n)
        return len(nodes)

    # -- facade over locks and residency ------------------------------------------------
    def lock(self, node: Node | None, kinds=None):  # noqa: ANN001 - see LockTable.lock
        return self.locks.lock(node, kinds)

    def unlock(self, handle) -> None:  # noqa: ANN001
        self.locks.unlock(handle)

    def evict_device(self, pages: int, kind: Kind = _FULL):  # noqa: ANN201
        return self.residency.evict_device(kind, pages)

    def evict_host(self, pages: int):  # noqa: ANN201
        return self.residency.evict_host(pages)

    def held_pages(self, tier: Tier, kind: Kind = _FULL) -> int:
        """Pages of ``kind``'s pool on ``tier`` the tree holds (MAMBA: slots)."""
        return self.residency.held_pages(tier, kind)
