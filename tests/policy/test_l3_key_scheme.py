"""L3 key schemes (``cache.l3_key_scheme``): ``chain64`` keys are equal iff SGLang's SHA-256
keys are (block prompts chain a tuple hash; conversations and token lists keep SHA-256),
tree nodes key their pages as requests do, the keys are the same in every process, and
a bad scheme is refused naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.kvcache.keys import NodeKeys
from hicache.runtime.handles import CacheExtentRef, PageRun, Tier
from hicache.tiers.hashing import BlockChains, ChainIds, chain64, l3_page_keys, page_hashes
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.request import BufferPages, TokenView
from hicache.workload.tokens import BlockTokens
from tests.policy.bijection import assert_bijection

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 8

# block prompts over few block ids, so that prompts share prefixes and the same block
# follows different prefixes
prompts = st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=5),
                             st.integers(1, BLOCK)), min_size=1, max_size=10)


def _block_prompt(ids: list[int], last: int, chains: BlockChains | None = None) -> BlockTokens:
    return BlockTokens(array("q", ids), (len(ids) - 1) * BLOCK + last, BLOCK, chains)


def _keys(tokens, page: int, scheme: str) -> list:
    return l3_page_keys(tokens, page_keys(tokens, page), page, scheme)  # type: ignore[arg-type]



@settings(max_examples=150, deadline=None)
@given(prompts=prompts, page=st.sampled_from([1, 2, 4, 8]))
def test_chain64_keys_of_block_prompts_are_equal_iff_their_sha256_keys_are(prompts, page):
    chains = BlockChains(BLOCK)
    pairs = []
    for ids, last in prompts:
        toks = _block_prompt(ids, last, chains)
        fast, slow = _keys(toks, page, "chain64"), _keys(toks, page, "sha256")
        assert slow == page_hashes(list(toks), page)
        assert len(fast) == len(slow) and all(type(k) is int for k in fast)
        pairs += zip(fast, slow, strict=True)
    assert_bijection(pairs)


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=12), min_size=1,
                      max_size=6), page=st.sampled_from([1, 2, 4]))
def test_conversations_and_token_lists_keep_sha256_under_chain64(turns, page):
    buf = array("q")
    pages = BufferPages(buf)
    for turn in turns:  # a conversation: one append-only buffer, a view per turn
        buf.extend(turn)
        view = TokenView(buf, len(buf), pages)
        want = page_hashes(list(buf), page)
        assert _keys(view, page, "chain64") == want == _keys(view, page, "sha256")
        assert _keys(list(buf), page, "chain64") == want


def _ext(first: int, n: int) -> CacheExtentRef:
    return CacheExtentRef("t", 0, Tier.DEVICE, (PageRun(first, n),))


@pytest.mark.parametrize("chain_ids", [False, True])
@settings(max_examples=60, deadline=None)
@given(prompts=prompts, page=st.sampled_from([2, 4, 8]))
def test_tree_nodes_key_their_pages_as_the_requests_do(chain_ids, prompts, page):
    """A backup's keys from its nodes (NodeKeys) are the keys its request computed, for
    whole paths and single nodes after splits (ancestors' keys memoised): chain64's, or
    the run's ChainIds when it keeps them."""
    tree, keys, base = UnifiedRadixTree(TreeSpec(page)), NodeKeys(page, "chain64"), 0
    keys.ids = run_ids = ChainIds() if chain_ids else None
    for ids, last in prompts:
        toks = _block_prompt(ids, last)
        pages = page_keys(toks, page)
        if not pages:
            continue
        m = tree.match(pages, touch=False)
        new = len(pages) - m.matched_pages
        if new:
            tree.insert(pages, {Kind.FULL: _ext(base, new)})
            base += new
        path = list(tree.match(pages, touch=False).path)
        want = l3_page_keys(toks, pages, page, "chain64", run_ids)
        assert keys.span(path) == tuple(want)
        first = sum(n.num_pages for n in path[:-1])
        assert keys.span([path[-1]]) == tuple(want[first:])


def test_the_same_page_after_different_prefixes_gets_different_keys():
    a = _keys(_block_prompt([1, 2], BLOCK), 4, "chain64")
    b = _keys(_block_prompt([5, 2], BLOCK), 4, "chain64")
    assert a[2:] != b[2:] and not set(a) & set(b)  # block 2's tokens alike, chains not
    alone = chain64([16, 20])  # block 2 with no prefix at all
    assert alone != a[2:] and alone != b[2:]


_CHILD = """
import json, sys
from array import array
from hicache.tiers.hashing import l3_page_keys
from hicache.tree.radix import page_keys
from hicache.workload.tokens import BlockTokens
out = []
for ids in ([3, 1, 4], [3, 1, 5], [9, 2, 6, 5]):
    t = BlockTokens(array("q", ids), len(ids) * 8 - 3, 8)
    out.append(l3_page_keys(t, page_keys(t, 4), 4, "chain64"))
print(json.dumps(out))
"""


def test_chain64_keys_are_the_same_in_every_process():
    """Tuple and int hashes take no PYTHONHASHSEED salt (str and bytes would)."""
    runs = []
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=ROOT,
                              capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
    here = []
    for ids in ([3, 1, 4], [3, 1, 5], [9, 2, 6, 5]):
        t = BlockTokens(array("q", ids), len(ids) * 8 - 3, 8)
        here.append(_keys(t, 4, "chain64"))
    assert runs[0] == runs[1] == runs[2] == here


def test_a_bad_scheme_is_refused_naming_the_field():
    from hicache.scenario import load_scenario

    with pytest.raises(Exception, match="l3_key_scheme") as err:
        load_scenario(ROOT / "scenarios/quick.yaml", ["cache.l3_key_scheme=md5"])
    assert "chain64" in str(err.value) and "sha256" in str(err.value)
    sc = load_scenario(ROOT / "scenarios/quick.yaml", ["cache.l3_key_scheme=sha256"])
    assert sc.cache.l3_key_scheme == "sha256"
    assert load_scenario(ROOT / "scenarios/quick.yaml").cache.l3_key_scheme == "chain64"
