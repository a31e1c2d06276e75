"""L3 keys of tree nodes equal the page-hash chain of the request's tokens, also after
splits and when ancestors were hashed before (memoized)."""

from __future__ import annotations

import random

from hicache.kvcache.keys import NodeKeys
from hicache.runtime.handles import CacheExtentRef, PageRun, Tier
from hicache.tiers.hashing import page_hashes
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.radix import UnifiedRadixTree, page_keys

PAGE = 4


def ext(first: int, n: int) -> CacheExtentRef:
    return CacheExtentRef("t", 0, Tier.DEVICE, (PageRun(first, n),))


def test_node_keys_match_the_hash_chain_of_the_tokens_after_splits() -> None:
    rng = random.Random(5)
    tree, keys, base = UnifiedRadixTree(TreeSpec(PAGE)), NodeKeys(PAGE), 0
    prompts = []
    for _ in range(30):
        stem = rng.choice(prompts)[:rng.randrange(0, 40)] if prompts else []
        tokens = stem + [rng.randrange(1000) for _ in range(rng.randrange(PAGE, 40))]
        pages = page_keys(tokens, PAGE)
        if not pages:
            continue
        prompts.append(tokens)
        m = tree.match(pages, touch=False)
        new = len(pages) - m.matched_pages
        if new:
            tree.insert(pages, {Kind.FULL: ext(base, new)})
            base += new
        path = tree.match(pages, touch=False).path
        want = page_hashes(tokens, PAGE)
        assert keys.span(list(path)) == tuple(want)  # the whole path
        first = sum(n.num_pages for n in path[:-1])
        assert keys.span([path[-1]]) == tuple(want[first:])  # one node, prior memoized


def test_block_prompts_page_keys_are_first_ids_and_hash_as_their_tokens() -> None:
    from array import array

    from hicache.workload.tokens import BlockTokens

    prompt = BlockTokens(array("q", [7, 3, 9]), 22, block=8)  # 2 full blocks + 6 tokens
    pages = page_keys(prompt, PAGE)
    assert pages == [56, 60, 24, 28, 72]  # each page's first token id (block id x 8 + j)
    tree = UnifiedRadixTree(TreeSpec(PAGE))
    tree.insert(pages, {Kind.FULL: ext(0, len(pages))})
    path = list(tree.match(pages, touch=False).path)
    assert NodeKeys(PAGE).span(path) == tuple(page_hashes(list(prompt), PAGE))
