"""Hybrid components on L2 in the tree: the L1+L2 boundary needs every component on some
tier (a FULL prefix on L2 whose MAMBA checkpoint was dropped is no hit beyond the last
checkpoint), L2 copies of one component leave on their own (host component eviction),
and the load plan (hicache.tree.loadback) brings back exactly what the boundary reads:
FULL missing on L1, the window's SWA pages (a long L2 SWA node split at the window's
start) and the checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from tree_harness import Harness

from hicache.runtime.handles import Tier
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.loadback import plan_loads
from hicache.tree.node import Node


def backed_up_path(spec: TreeSpec, ids: list[list[int]]) -> tuple[Harness, list]:
    """Insert each prefix (a checkpoint at its end), back every node up, then demote all
    to L2 (FULL eviction of the whole tree)."""
    h = Harness(spec, host_enabled=True)
    pages = h.pages(ids[-1])
    for prefix in ids:
        h.insert(h.pages(prefix))
    for node in list(h.tree.nodes.values()):
        h.complete_backup(h.begin_backup(node))
    h.evict_device(10_000)
    h.check_accounting()
    return h, pages


def test_a_full_prefix_on_l2_without_its_checkpoint_is_no_hit_beyond_the_last_one():
    spec = TreeSpec.hybrid(4, swa_window=8, mamba=True)
    h, pages = backed_up_path(spec, [[1, 2], [1, 2, 3, 4]])
    m = h.tree.match(pages, touch=False)
    assert (m.device_tokens, m.host_tokens) == (0, 16)  # both checkpoints on L2
    last = m.path[-1]
    h.execute(h.tree.residency.evict_host_component(Kind.MAMBA, 1).actions)  # LRU: n1's
    assert Kind.MAMBA in last.host
    res = h.tree.residency  # now drop the deeper one: reuse stops at the first checkpoint
    h.alloc[(Tier.HOST, Kind.MAMBA)].free(res.pop_value(last, Tier.HOST, Kind.MAMBA))
    m = h.tree.match(pages, touch=False)
    assert m.matched_pages == 4 and m.host_tokens == 0  # n1's was dropped first
    h.check_accounting()


def test_the_load_plan_brings_back_what_the_boundary_reads():
    spec = TreeSpec.hybrid(4, swa_window=8, mamba=True)
    h, pages = backed_up_path(spec, [[1, 2, 3, 4, 5, 6]])  # one node of 6 pages on L2
    m = h.tree.match(pages, touch=False)
    assert m.host_tokens == 24
    node = m.path[-1]
    assert node.host[Kind.SWA].num_pages == 2  # the insert's SWA: the last window only
    loads = plan_loads(h.tree, m)
    assert loads.tokens == 24 and loads.mamba is loads.path[-1]
    assert loads.pages(Kind.FULL) == 6 and loads.pages(Kind.SWA) == 2
    assert loads.pages(Kind.MAMBA) == 1 and set(loads.sources) == {*loads.path}
    h.check_accounting()


def test_a_long_l2_swa_node_is_split_so_only_the_window_is_loaded():
    spec = TreeSpec.hybrid(4, swa_window=12, mamba=False)  # a window of 3 pages
    h = Harness(spec, host_enabled=True)
    pages = h.pages([1, 2, 3, 4, 5])
    h.insert(pages[:4], swa_pages=4)  # [1] [2 3 4]: the last window is a node of its own
    h.insert(pages, swa_pages=1)  # + [5]
    middle = h.tree.match(pages[:4], touch=False).path[-1]
    assert middle.num_pages == 3
    h.complete_backup(h.begin_backup(middle))
    # SWA leaves L1 (an SWA tombstone), its L2 copy stays
    h.alloc[(Tier.DEVICE, Kind.SWA)].free(h.tree.residency.pop_value(middle, Tier.DEVICE, Kind.SWA))
    m = h.tree.match(pages, touch=False)
    assert m.device_tokens == 4 and m.host_tokens == 16  # [1] holds its window on L1
    loads = plan_loads(h.tree, m)
    assert loads.full == () and loads.mamba is None
    assert [n.num_pages for n in loads.path] == [1, 1, 2, 1]  # [2 3 4] split at the window
    assert loads.swa == (loads.path[2],) and loads.pages(Kind.SWA) == 2  # 2 pages, not 3
    h.check_accounting()


# -- random op streams -----------------------------------------------------------------------

prompts = st.lists(st.integers(1, 3), min_size=1, max_size=8)
KINDS = (Kind.FULL, Kind.SWA, Kind.MAMBA)


class HybridL2Machine(RuleBasedStateMachine):
    """Inserts, backups, evictions of each component on each tier and load-backs through
    plan_loads, interleaved at random (FULL + SWA window 8 + MAMBA, page 4): after each
    step the tree's invariants and the allocators' accounting hold, and after a load-back
    the L1 boundary reaches what the plan promised (every component is on L1 there)."""

    def __init__(self) -> None:
        super().__init__()
        spec = TreeSpec.hybrid(4, swa_window=8, mamba=True)
        self.h = Harness(spec, device_pages=40, host_pages=60, host_enabled=True)

    def _room(self, kind: Kind, pages: int) -> bool:
        a = self.h.alloc[(Tier.DEVICE, kind)]
        if a.free_pages < pages:
            self.h.evict_device(pages - a.free_pages, kind)
        return a.free_pages >= pages

    @rule(ids=prompts, swa=st.integers(0, 8), mamba=st.booleans())
    def insert(self, ids: list[int], swa: int, mamba: bool) -> None:
        pages = self.h.pages(ids)
        n, k = len(pages), min(swa, len(pages))
        if self._room(Kind.FULL, n) and self._room(Kind.SWA, k) and self._room(Kind.MAMBA, 1):
            self.h.insert(pages, swa_pages=k, mamba=mamba)

    @rule(data=st.data())
    def backup(self, data: st.DataObject) -> None:
        self._backup(lambda nodes: data.draw(st.sampled_from(nodes)))

    def _backup(self, pick: Callable[[list[Node]], Node]) -> None:
        nodes = [n for n in self.h.tree.nodes.values() if n.on_device and not n.on_host
                 and not n.backing_up]
        if nodes:
            node = pick(sorted(nodes, key=lambda n: n.id))
            host = self.h.alloc[(Tier.HOST, Kind.FULL)]
            if host.free_pages >= node.num_pages:
                self.h.complete_backup(self.h.begin_backup(node))

    @rule(kind=st.sampled_from(KINDS), pages=st.integers(1, 6))
    def evict_device(self, kind: Kind, pages: int) -> None:
        self.h.evict_device(pages, kind)

    @rule(pages=st.integers(1, 6))
    def evict_host(self, pages: int) -> None:
        self.h.evict_host(pages)

    @rule(kind=st.sampled_from((Kind.SWA, Kind.MAMBA)), pages=st.integers(1, 3))
    def evict_host_component(self, kind: Kind, pages: int) -> None:
        res = self.h.tree.residency.evict_host_component(kind, pages)
        assert all(a.kind in (kind, Kind.MAMBA) for a in res.actions)
        self.h.execute(res.actions)

    @rule(data=st.data())
    def load_back(self, data: st.DataObject) -> None:
        self._load_back(lambda nodes: data.draw(st.sampled_from(nodes)))

    def _load_back(self, pick: Callable[[list[Node]], Node]) -> bool:
        """Reuse the path to a node with a checkpoint on L2 (where a boundary can be);
        True when something was loaded."""
        tree = self.h.tree
        ends = sorted((n for n in tree.nodes.values() if Kind.MAMBA in n.host),
                      key=lambda n: n.id)
        if not ends:
            return False
        end = pick(ends)
        pages = [p for n in reversed(list(tree.path_to_root(end))) for p in n.key]
        m = tree.match(pages)
        if not m.host_tokens:
            return False
        loads = plan_loads(tree, m)
        assert loads.tokens == m.total_tokens and not loads.empty
        lock = tree.lock(loads.path[-1])
        pin = tree.locks.lock_host(loads.sources)
        placed = all(self._room(k, loads.pages(k)) for k in KINDS)
        if placed:
            targets = ([(n, Kind.FULL) for n in loads.full] + [(n, Kind.SWA) for n in loads.swa]
                       + ([(loads.mamba, Kind.MAMBA)] if loads.mamba else []))
            for node, kind in targets:
                assert kind in node.host and kind not in node.device
                ext = self.h.take(Tier.DEVICE, kind, node.host[kind].num_pages)
                tree.residency.put_value(node, Tier.DEVICE, kind, ext)
                tree.residency.touched(node)
            assert tree.match(pages, touch=False).device_tokens >= loads.tokens
        tree.unlock(pin)
        tree.unlock(lock)
        return placed

    @invariant()
    def accounting(self) -> None:
        self.h.check_accounting()


TestHybridL2Machine = HybridL2Machine.TestCase


@pytest.mark.parametrize("seed", range(3))
def test_long_random_op_streams_with_load_backs(seed: int) -> None:
    """The machine's rules, 1,500 steps of them per seed (Hypothesis keeps its runs short,
    so this also makes sure load-backs of every component happen)."""
    rng = random.Random(seed)
    m = HybridL2Machine()
    placed = 0
    for _ in range(1500):
        r = rng.random()
        ids = [rng.randint(1, 3) for _ in range(rng.randint(1, 8))]
        if r < 0.3:
            m.insert(ids, rng.randint(2, 8), rng.random() < 0.8)
        elif r < 0.5:
            m._backup(rng.choice)
        elif r < 0.65:
            m.evict_device(rng.choice(KINDS), rng.randint(1, 6))
        elif r < 0.7:
            m.evict_host(rng.randint(1, 6))
        elif r < 0.75:
            m.evict_host_component(rng.choice((Kind.SWA, Kind.MAMBA)), rng.randint(1, 3))
        else:
            placed += m._load_back(rng.choice)
        m.accounting()
    assert placed >= 20
