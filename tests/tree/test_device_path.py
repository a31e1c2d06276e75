"""device_path(node) after an insert equals the L1 part of a fresh match of the inserted
pages (``match(pages, touch=False).path[:device_nodes]``), and that match would have
split nothing and stamped nothing: the write policy reads the path from the insert's last
node instead of walking the keys again (KVCacheManager.write_through's ``end``). Likewise
reuse_path(node) equals the match's whole path, to the L1+L2 boundary (the L3 prefetcher's
lock of what it fetched, L3Prefetcher._insert)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache.runtime.handles import Tier
from hicache.tree.allocator import OutOfPages
from hicache.tree.components import ComponentSpec, Kind, TreeSpec
from tests.tree.tree_harness import Harness

seqs = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=5)
ops = st.lists(st.tuples(st.sampled_from(["insert", "suffix", "evict", "backup",
                                          "evict_host"]),
                         st.integers(0, 4), st.integers(1, 6)), max_size=40)

SPECS = {
    "full": TreeSpec(2),
    "swa": TreeSpec(2, (ComponentSpec(Kind.FULL), ComponentSpec(Kind.SWA, window=4))),
}


def _shape(h: Harness) -> tuple:
    return h.tree.clock, h.tree.shape, sorted((n.id, n.last_access) for n in h.tree.nodes.values())


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
@given(sequences=seqs, script=ops)
def test_device_path_is_the_match_after_an_insert(spec: TreeSpec, sequences: list[list[int]],
                                                   script: list) -> None:
    h = Harness(spec, device_pages=40, host_enabled=True)  # L2 on: evictions leave holes
    lists = [h.pages(s) for s in sequences]
    for op, i, n in script:
        pages = lists[i % len(lists)][:n]
        if op in ("insert", "suffix"):
            held = h.tree.match(pages, touch=False).matched_pages if op == "suffix" else 0
            if held >= len(pages):
                continue
            try:
                res = h.insert(pages, h.fresh_values(len(pages) - held))
            except OutOfPages:
                continue  # L1 full: not a case
            before = _shape(h)
            m = h.tree.match(pages, touch=False)
            assert _shape(h) == before  # the second walk splits and stamps nothing
            assert h.tree.device_path(res.node) == m.path[:m.device_nodes]
            assert h.tree.reuse_path(res.node) == m.path  # the L1+L2 part (prefetch inserts)
        else:
            h.change(op, pages, n)


def test_reuse_path_reaches_past_l1_over_fetched_l2_pages() -> None:
    """The prefetcher's case: fetched pages inserted on L2 below an L1 prefix; the path
    runs to the fetched node (and stops at a node with data nowhere)."""
    h = Harness(TreeSpec(2), device_pages=40, host_enabled=True)
    pages = h.pages([1, 2, 3, 4, 5])
    h.insert(pages[:2])  # the L1 prefix
    res = h.tree.insert(pages[:5], {Kind.FULL: h.take(Tier.HOST, Kind.FULL, 3)},
                        tier=Tier.HOST)
    m = h.tree.match(pages, touch=False)
    assert len(m.path) == 2 and m.device_nodes == 1  # L1 node, then the fetched L2 node
    assert h.tree.reuse_path(res.node) == m.path
    assert h.tree.reuse_path(m.path[0]) == m.path[:1]
