"""Hybrid components on L2 in the tree: the L1+L2 boundary needs every component on some
tier (a FULL prefix on L2 whose MAMBA checkpoint was dropped is no hit beyond the last
checkpoint), L2 copies of one component leave on their own (host component eviction),
and the load plan (hicache.tree.loadback) brings back exactly what the boundary reads:
FULL missing on L1, the window's SWA pages (a long L2 SWA node split at the window's
start) and the checkpoint.
"""

from __future__ import annotations

from tree_harness import Harness

from hicache.runtime.handles import Tier
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.loadback import plan_loads


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
    h.alloc[(Tier.HOST, "mamba")].free(res.pop_value(last, "host", Kind.MAMBA))
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
    h.alloc[(Tier.DEVICE, "swa")].free(h.tree.residency.pop_value(middle, "device", Kind.SWA))
    m = h.tree.match(pages, touch=False)
    assert m.device_tokens == 4 and m.host_tokens == 16  # [1] holds its window on L1
    loads = plan_loads(h.tree, m)
    assert loads.full == () and loads.mamba is None
    assert [n.num_pages for n in loads.path] == [1, 1, 2, 1]  # [2 3 4] split at the window
    assert loads.swa == (loads.path[2],) and loads.pages(Kind.SWA) == 2  # 2 pages, not 3
    h.check_accounting()
