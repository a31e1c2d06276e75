"""BlockChains: the page-hash chains of block prompts from a shared memo are, bit for bit,
the chains hashed from scratch, whatever order prompts come in, however small the memo."""

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.tiers.hashing import BlockChains, page_hashes
from hicache.workload.tokens import BlockTokens

BLOCK = 8


def scratch(ids: list[int], length: int, page: int) -> list[str]:
    """The chain of the expanded tokens, no memo (the reference)."""
    tokens = [h * BLOCK + j for h in ids for j in range(BLOCK)][:length]
    return page_hashes(tokens, page)


prompts = st.lists(st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=5),
                             st.integers(1, BLOCK)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(prompts=prompts, page=st.sampled_from([1, 2, 4, 8]), limit=st.integers(1, 6))
def test_memoised_chains_equal_chains_from_scratch(prompts, page, limit):
    chains = BlockChains(BLOCK, limit)
    for ids, last in prompts:  # ids drawn from few values: prompts share prefixes
        length = (len(ids) - 1) * BLOCK + last
        toks = BlockTokens(array("q", ids), length, BLOCK, chains)
        assert page_hashes(toks, page) == scratch(ids, length, page)


def test_a_prompt_extending_another_hashes_only_its_new_pages():
    chains = BlockChains(BLOCK)
    short = BlockTokens(array("q", [3, 1]), 12, BLOCK, chains)  # 1.5 blocks: 3 pages of 4
    assert page_hashes(short, 4) == scratch([3, 1], 12, 4)
    assert chains.hashed_pages == 3
    longer = BlockTokens(array("q", [3, 1, 4]), 24, BLOCK, chains)  # extends it: 6 pages
    assert page_hashes(longer, 4) == scratch([3, 1, 4], 24, 4)
    assert chains.hashed_pages == 6  # the 3 new pages only
    again = BlockTokens(array("q", [3, 1, 4]), 24, BLOCK, chains)
    assert page_hashes(again, 4) == scratch([3, 1, 4], 24, 4)
    assert chains.hashed_pages == 6


def test_same_block_id_after_a_different_prefix_gets_different_keys():
    chains = BlockChains(BLOCK)
    a = page_hashes(BlockTokens(array("q", [1, 2]), 16, BLOCK, chains), 8)
    b = page_hashes(BlockTokens(array("q", [5, 2]), 16, BLOCK, chains), 8)
    assert a[1] != b[1]  # block 2's tokens are the same, their chains are not
    assert b == scratch([5, 2], 16, 8)


def test_returned_lists_are_the_callers():
    chains = BlockChains(BLOCK)
    toks = BlockTokens(array("q", [7]), 8, BLOCK, chains)
    page_hashes(toks, 4).clear()
    assert page_hashes(toks, 4) == scratch([7], 8, 4)


def test_pages_straddling_blocks_and_memo_free_prompts_fall_back():
    chains = BlockChains(BLOCK)
    toks = BlockTokens(array("q", [2, 9]), 16, BLOCK, chains)
    assert toks.page_hashes(3) is None  # 3 does not divide 8
    assert page_hashes(toks, 3) == scratch([2, 9], 16, 3)
    assert BlockTokens(array("q", [2, 9]), 16, BLOCK).page_hashes(4) is None
    with pytest.raises(ValueError):
        BlockTokens(array("q", [2]), 8, BLOCK, BlockChains(16))
