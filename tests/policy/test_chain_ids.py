"""Chain ids (:class:`hicache.tiers.hashing.ChainIds`): a run's dense ids of integer page
chains are equal iff chain64's keys are, a chain's new pages get consecutive ids, a
chain continued from a page's id gets the ids of the whole chain's tail, and tree nodes
key their pages as requests do under them."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.kvcache.keys import NodeKeys
from hicache.runtime.handles import CacheExtentRef, PageRun, Tier
from hicache.tiers.hashing import ChainIds, chain64, l3_page_keys
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.tokens import BlockTokens

# page chains over few page keys: chains share prefixes, branch anywhere (mid-batch too),
# and one page key follows different prefixes
chains = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=12), min_size=1,
                  max_size=12)


def _equal_iff(pairs: list[tuple[object, object]]) -> None:
    fwd: dict[object, object] = {}
    back: dict[object, object] = {}
    for a, b in pairs:
        assert fwd.setdefault(a, b) == b
        assert back.setdefault(b, a) == a


@settings(max_examples=300, deadline=None)
@given(chains=chains, cut=st.integers(0, 12))
def test_ids_are_equal_iff_chain64_keys_are(chains, cut):
    ids = ChainIds()
    pairs = []
    for pages in chains:
        got = ids.ids(tuple(pages))
        assert len(got) == len(pages) and all(type(i) is int for i in got)
        pairs += zip(got, chain64(pages), strict=True)
        # continued from a page's id: the tail of the whole chain's ids
        c = min(cut, len(pages))
        if 0 < c:
            assert ids.ids(pages[c:], got[c - 1]) == got[c:]
        assert ids.ids(pages) == got  # asked again: the same ids
    _equal_iff(pairs)
    assert sorted({i for i, _ in pairs}) == list(range(len(ids)))  # dense, from 0


def test_new_pages_get_consecutive_ids_and_a_branch_a_new_batch():
    ids = ChainIds()
    assert ids.ids([7, 8, 9, 10]) == [0, 1, 2, 3]
    assert ids.ids([7, 8, 5, 6]) == [0, 1, 4, 5]  # branches mid-batch
    assert ids.ids([7, 8, 9, 10, 11, 12]) == [0, 1, 2, 3, 6, 7]  # continues a batch's end
    assert ids.ids([8, 9]) == [8, 9]  # the same pages from the start: another chain
    assert ids.ids([11], 3) == [6] and ids.ids([9], 1) == [2]
    assert ids.ids([]) == [] and len(ids) == 10


def _ext(first: int, n: int) -> CacheExtentRef:
    return CacheExtentRef("t", 0, Tier.DEVICE, (PageRun(first, n),))


@settings(max_examples=60, deadline=None)
@given(prompts=st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=5),
                                  st.integers(1, 8)), min_size=1, max_size=10),
       page=st.sampled_from([2, 4, 8]))
def test_tree_nodes_key_their_pages_as_the_requests_do_by_chain_ids(prompts, page):
    """NodeKeys with the run's ChainIds gives a span the ids its request got (ancestors'
    last ids memoised, nodes split on the way)."""
    ids = ChainIds()
    tree, keys, base = UnifiedRadixTree(TreeSpec(page)), NodeKeys(page, "chain64"), 0
    keys.ids = ids
    for blocks, last in prompts:
        toks = BlockTokens(array("q", blocks), (len(blocks) - 1) * 8 + last, 8)
        pages = page_keys(toks, page)
        if not pages:
            continue
        want = l3_page_keys(toks, pages, page, "chain64", ids)
        assert want == ids.ids(pages)
        m = tree.match(pages, touch=False)
        new = len(pages) - m.matched_pages
        if new:
            tree.insert(pages, {Kind.FULL: _ext(base, new)})
            base += new
        path = list(tree.match(pages, touch=False).path)
        assert keys.span(path) == tuple(want)
        first = sum(n.num_pages for n in path[:-1])
        assert keys.span([path[-1]]) == tuple(want[first:])
