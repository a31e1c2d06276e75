"""Stateful property tests of the unified tree against real page allocators.

Random interleavings of requests (match + lock, later insert + unlock + session ref),
plain inserts, evictions (FULL, SWA, MAMBA, host), backups and sessions, on a hybrid
spec (FULL + SWA window 8 + MAMBA, page 4) and on FULL only. After every step:

  * allocator used == tree held + pages held by live test-side requests and backups
    (PageAllocator raises on a double free)
  * lock counts are positive and equal to what live handles raised; zero at the end
  * no eviction action touches a component locked when it ran
  * a match's reuse boundaries equal the seed-003 rule recomputed on the matched path
  * each SWA/MAMBA recency list holds exactly the nodes with that component on L1
  * with ``free_swa_tombstone_leaves``: no unlocked device leaf carries an SWA tombstone
  * a match right after an insert returns the whole inserted prefix

How many examples run comes from the Hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)
from tree_harness import Harness

from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.tree.actions import BackupNode, Deleted, Demoted, FreeDevice, FreeHost
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.locks import LockHandle
from hicache.tree.node import HOST
from hicache.tree.options import TreeOptions

# a prompt is a list of page ids from a small alphabet, so prompts share prefixes
prompts = st.lists(st.integers(1, 3), min_size=1, max_size=10)
SESSIONS = ("s1", "s2", "s3")


@dataclass
class Request:
    pages: list
    handle: LockHandle
    own: CacheExtentRef | None  # borrowed FULL pages of the tree (up to the L1 boundary)
    new: CacheExtentRef | None  # FULL pages the request computed itself
    session: str | None
    host_handle: LockHandle | None = None  # L2 copies the request would load


def seed_boundary(path: list, window: int, mamba: bool, page: int, has) -> int:  # noqa: ANN001
    """Seed 003's toy rule, written independently of hicache.tree.boundary."""
    best, pos = 0, 0
    for i, node in enumerate(path):
        pos += node.num_pages * page
        if not all(has(n, Kind.FULL) for n in path[: i + 1]):
            break
        ok = True
        if window:
            need, j = window, i
            while need > 0 and j >= 0:
                if not has(path[j], Kind.SWA):
                    ok = False
                    break
                need -= path[j].num_pages * page
                j -= 1
        if mamba and not has(node, Kind.MAMBA):
            ok = False
        if ok:
            best = pos
    return best


class TreeMachine(RuleBasedStateMachine):
    spec: TreeSpec = TreeSpec(page_size=4)
    write_back = False
    options = TreeOptions()
    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(self.spec, device_pages=4096, host_pages=4096,
                         session_aware=True, host_enabled=True, write_back=self.write_back,
                         options=self.options)
        self.window = self.spec.get(Kind.SWA).window if self.spec.get(Kind.SWA) else 0
        self.live: list[Request] = []
        self.excused: set[int] = set()  # tombstoned device leaves the cascade could not take
        self.mamba = self.spec.get(Kind.MAMBA) is not None

    @property
    def tree(self):  # noqa: ANN201
        return self.h.tree

    # -- helpers -------------------------------------------------------------------------
    def structural_path(self, pages: list) -> list:
        """Follow ``pages`` through whole nodes without splitting (after a match split)."""
        node, i, out = self.tree.root, 0, []
        while i < len(pages) and pages[i] in node.children:
            child = node.children[pages[i]]
            assert child.key == list(pages[i:i + child.num_pages]), "match left a partial node"
            out.append(child)
            i += child.num_pages
            node = child
        return out

    def checked_match(self, pages: list):  # noqa: ANN201
        m = self.tree.match(pages)
        path = self.structural_path(pages)
        assert m.matched_pages == sum(n.num_pages for n in path)
        page = self.spec.page_size
        dev = seed_boundary(path, self.window, self.mamba, page, lambda n, k: k in n.device)
        both = seed_boundary(path, self.window, self.mamba, page,
                             lambda n, k: k in n.device or k in n.host)
        assert m.device_tokens == dev
        assert m.device_tokens + m.host_tokens == max(dev, both)
        assert sum(n.num_pages for n in m.path[:m.device_nodes]) * page == dev
        return m

    def request_values(self, n: int, own: CacheExtentRef | None,
                       new: CacheExtentRef | None) -> dict:
        parts = [e for e in (own, new) if e is not None]
        values = {Kind.FULL: CacheExtentRef.concat(parts)}
        if self.window:
            k = min(n, -(-self.window // self.spec.page_size) + 1)
            values[Kind.SWA] = self.h.take(Tier.DEVICE, Kind.SWA, k)
        if self.spec.get(Kind.MAMBA):
            values[Kind.MAMBA] = self.h.take(Tier.DEVICE, Kind.MAMBA, 1)
        return values

    def insert_and_check(self, pages: list, values: dict) -> None:
        res = self.tree.insert(pages, values)
        self.h.execute(res.actions)
        m = self.checked_match(pages)
        assert m.matched_pages == len(pages)
        assert m.device_tokens == len(pages) * self.spec.page_size

    def locked_snapshot(self) -> tuple[set, set, set]:
        comp, anydev, host = set(), set(), set()
        for n in self.tree.nodes.values():
            for k, v in n.locks.items():
                if v <= 0:
                    continue
                if k == HOST:
                    host.add(n.id)
                else:
                    comp.add((n.id, k))
                    anydev.add(n.id)
        return comp, anydev, host

    def check_actions(self, actions: list, snap: tuple[set, set, set]) -> None:
        comp, anydev, host = snap
        for a in actions:
            if isinstance(a, FreeDevice):
                assert (a.node_id, a.kind) not in comp, f"freed locked {a}"
            elif isinstance(a, FreeHost):
                assert a.node_id not in host, f"freed host-locked {a}"
            elif isinstance(a, Demoted):  # keeps the L2 copy: a host lock does not object
                assert a.node_id not in anydev, f"demoted locked {a}"
            elif isinstance(a, Deleted):
                assert a.node_id not in anydev and a.node_id not in host, f"deleted locked {a}"

    # -- rules ---------------------------------------------------------------------------
    @rule(target=requests, ids=prompts, session=st.sampled_from((None, *SESSIONS)),
          pin_host=st.booleans())
    def start_request(self, ids: list, session: str | None, pin_host: bool) -> Request:
        pages = self.h.pages(ids)
        m = self.checked_match(pages)
        node = m.device_node
        handle = self.tree.lock(node)
        host_handle = self.tree.locks.lock_host(m.host_tail) if pin_host else None
        k = m.device_tokens // self.spec.page_size
        own = (CacheExtentRef.concat(n.device[Kind.FULL] for n in m.path[:m.device_nodes])
               if k else None)
        new = self.h.take(Tier.DEVICE, Kind.FULL, len(pages) - k) if len(pages) > k else None
        if new is not None:
            key = (Tier.DEVICE, Kind.FULL)
            self.h.test_held[key] = self.h.test_held.get(key, 0) + new.num_pages
        req = Request(pages, handle, own, new, session, host_handle)
        self.live.append(req)
        return req

    @rule(req=consumes(requests))
    def finish_request(self, req: Request) -> None:
        if req.new is not None:
            self.h.test_held[(Tier.DEVICE, Kind.FULL)] -= req.new.num_pages
        self.live.remove(req)
        self.insert_and_check(req.pages, self.request_values(len(req.pages), req.own, req.new))
        self.tree.unlock(req.handle)
        if req.host_handle is not None:
            self.tree.unlock(req.host_handle)
        if req.session is not None:
            last = self.tree.match(req.pages, touch=False).last_node
            self.tree.reference_session(req.session, last)

    @rule(ids=prompts)
    def insert_fresh(self, ids: list) -> None:
        pages = self.h.pages(ids)
        new = self.h.take(Tier.DEVICE, Kind.FULL, len(pages))
        self.insert_and_check(pages, self.request_values(len(pages), None, new))

    @rule(ids=prompts)
    def insert_host(self, ids: list) -> None:
        """L2 data arriving from below (an L3 prefetch): FULL, an SWA suffix, a checkpoint."""
        pages = self.h.pages(ids)
        values = {Kind.FULL: self.h.take(Tier.HOST, Kind.FULL, len(pages))}
        if self.window:
            values[Kind.SWA] = self.h.take(Tier.HOST, Kind.SWA, min(len(pages), 3))
        if self.mamba:
            values[Kind.MAMBA] = self.h.take(Tier.HOST, Kind.MAMBA, 1)
        res = self.tree.insert(pages, values, tier=Tier.HOST)
        assert all(isinstance(a, FreeHost) for a in res.actions)
        self.h.execute(res.actions)
        assert self.checked_match(pages).matched_pages == len(pages)

    @rule(ids=prompts)
    def match(self, ids: list) -> None:
        self.checked_match(self.h.pages(ids))

    @rule(pages=st.integers(1, 12), kind=st.sampled_from((Kind.FULL, Kind.SWA, Kind.MAMBA)))
    def evict_device(self, pages: int, kind: Kind) -> None:
        if self.spec.get(kind) is None:
            kind = Kind.FULL
        snap = self.locked_snapshot()
        res = self.tree.evict_device(pages, kind)
        self.check_actions(res.actions, snap)
        self.h.execute(res.actions)
        for a in res.actions:
            if isinstance(a, BackupNode):
                assert a.node_id in self.h.pending

    @rule(pages=st.integers(1, 12))
    def evict_host(self, pages: int) -> None:
        host_only = {n.id: {c.id for c in n.children.values()}
                     for n in self.tree.nodes.values()
                     if not n.on_device and n.on_host and not n.locked(HOST)}
        snap = self.locked_snapshot()
        res = self.tree.evict_host(pages)
        self.check_actions(res.actions, snap)
        deleted = {a.node_id for a in res.actions if isinstance(a, Deleted)}
        for a in res.actions:
            assert isinstance(a, FreeHost | Deleted), a
            assert a.node_id in host_only, f"evict_host touched {a}"
            # a node with children leaves only after them (a leaf when it goes)
            assert host_only[a.node_id] <= deleted, f"evict_host removed inner {a}"
        self.h.execute(res.actions)

    @rule(data=st.data())
    def begin_backup(self, data: st.DataObject) -> None:
        nodes = sorted((n for n in self.tree.nodes.values()
                        if n.on_device and not n.on_host and not n.backing_up),
                       key=lambda n: n.id)
        if nodes:
            self.h.begin_backup(data.draw(st.sampled_from(nodes)))

    @precondition(lambda self: self.h.pending)
    @rule(data=st.data())
    def complete_backup(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(sorted(self.h.pending)))
        for n in self.h.complete_backup(job):
            assert not n.backing_up

    @rule(session=st.sampled_from(SESSIONS))
    def close_session(self, session: str) -> None:
        self.tree.close_session(session)
        assert all(session not in n.sessions for n in self.tree.nodes.values())

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def accounting(self) -> None:
        self.h.check_accounting()

    @invariant()
    def lock_counts_match_live_handles(self) -> None:
        expected: dict = {}
        for h in self.tree.locks.live.values():
            for node, key in h.entries:
                expected[(node.id, key)] = expected.get((node.id, key), 0) + 1
        actual = {(n.id, k): v for n in self.tree.nodes.values() for k, v in n.locks.items()}
        assert all(v > 0 for v in actual.values())
        assert {k: v for k, v in expected.items() if k[0] in self.tree.nodes} == actual

    @invariant()
    def device_nodes_hang_from_device_nodes(self) -> None:
        for n in self.tree.nodes.values():
            if n.on_device and n.parent is not self.tree.root:
                assert n.parent.on_device, f"{n} on L1 under host-only {n.parent}"

    @invariant()
    def recency_lists_hold_exactly_the_l1_holders(self) -> None:
        for kind, lru in self.tree.residency.lru.items():
            listed = [n.id for n in lru]
            assert len(listed) == len(set(listed)) == len(lru)
            assert set(listed) == {n.id for n in self.tree.nodes.values() if kind in n.device}

    @invariant()
    def no_device_leaf_has_an_swa_tombstone(self) -> None:
        """With ``free_swa_tombstone_leaves`` eviction takes a parent left as a tombstoned
        device leaf along with its child. Only a parent that was locked or being backed
        up then may stay that way (until it is evicted itself)."""
        if not self.window or not self.options.free_swa_tombstone_leaves:
            return
        now = {n.id for n in self.tree.nodes.values()
               if n.is_device_leaf() and Kind.SWA not in n.device}
        for nid in now:
            n = self.tree.nodes[nid]
            if n.any_device_lock() or n.backing_up:
                self.excused.add(nid)
            assert nid in self.excused, f"device leaf {n} has an SWA tombstone"
        self.excused &= now

    def teardown(self) -> None:
        for req in list(self.live):
            self.tree.unlock(req.handle)
            if req.host_handle is not None:
                self.tree.unlock(req.host_handle)
        assert all(not n.locks for n in self.tree.nodes.values())
        assert not self.tree.locks.live


class HybridMachine(TreeMachine):
    spec = TreeSpec.hybrid(4, swa_window=8, mamba=True)


class HybridWriteBackMachine(TreeMachine):
    spec = TreeSpec.hybrid(4, swa_window=8, mamba=True)
    write_back = True


class HybridFreeTombstonesMachine(TreeMachine):
    spec = TreeSpec.hybrid(4, swa_window=8, mamba=True)
    options = TreeOptions(free_swa_tombstone_leaves=True)


class FullOnlyMachine(TreeMachine):
    spec = TreeSpec(page_size=4)


TestHybridTree = HybridMachine.TestCase
TestHybridWriteBackTree = HybridWriteBackMachine.TestCase
TestHybridFreeTombstonesTree = HybridFreeTombstonesMachine.TestCase
TestFullOnlyTree = FullOnlyMachine.TestCase
