"""Chain ids (:class:`hicache.tiers.hashing.ChainIds`): a run's dense ids of integer page
chains are equal iff chain64's keys are, a chain's new pages get consecutive ids, a
chain continued from a page's id gets the ids of the whole chain's tail (tree nodes key
their pages as requests do under them: tests/policy/test_l3_key_scheme.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.tiers.hashing import ChainIds, chain64, chain_keys, l3_page_keys
from tests.policy.bijection import assert_bijection

# page chains over few page keys: chains share prefixes, branch anywhere (mid-batch too),
# and one page key follows different prefixes
chains = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=12), min_size=1,
                  max_size=12)



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
    assert_bijection(pairs)
    assert sorted({i for i, _ in pairs}) == list(range(len(ids)))  # dense, from 0


def test_new_pages_get_consecutive_ids_and_a_branch_a_new_batch():
    ids = ChainIds()
    assert ids.ids([7, 8, 9, 10]) == [0, 1, 2, 3]
    assert ids.ids([7, 8, 5, 6]) == [0, 1, 4, 5]  # branches mid-batch
    assert ids.ids([7, 8, 9, 10, 11, 12]) == [0, 1, 2, 3, 6, 7]  # continues a batch's end
    assert ids.ids([8, 9]) == [8, 9]  # the same pages from the start: another chain
    assert ids.ids([11], 3) == [6] and ids.ids([9], 1) == [2]
    assert ids.ids([]) == [] and len(ids) == 10


@settings(max_examples=300, deadline=None)
@given(chains=chains, cut=st.integers(0, 12), fresh=st.booleans())
def test_ids_of_bytes_page_keys_are_equal_iff_sha256_keys_are(chains, cut, fresh):
    """Bytes page keys (packed tokens: conversations) take ids where ``bytes_keys``: equal
    iff their SHA-256 chains are (:func:`chain_keys`), from equal key objects or merely
    equal bytes (``fresh``: a new object per page each time, no identity to go by)."""
    ids = ChainIds(bytes_keys=True)
    table = [bytes([k]) * 16 for k in range(4)]

    def keys(pages: list[int]) -> list[bytes]:
        return [bytes(bytearray(table[p])) if fresh else table[p] for p in pages]

    pairs = []
    for pages in chains:
        got = ids.ids(keys(pages))
        assert len(got) == len(pages) and all(type(i) is int for i in got)
        pairs += zip(got, chain_keys(keys(pages)), strict=True)
        c = min(cut, len(pages))
        if 0 < c:
            assert ids.ids(keys(pages[c:]), got[c - 1]) == got[c:]
        assert ids.ids(keys(pages)) == got
    assert_bijection(pairs)
    assert sorted({i for i, _ in pairs}) == list(range(len(ids)))


def test_which_page_keys_take_ids():
    """Integers always; bytes only where ``bytes_keys`` (else their SHA-256 chain keys
    them: l3_page_keys, NodeKeys); anything else never."""
    assert ChainIds().keys_ids(3) and ChainIds(bytes_keys=True).keys_ids(3)
    assert not ChainIds().keys_ids(b"x") and ChainIds(bytes_keys=True).keys_ids(b"x")
    assert not ChainIds(bytes_keys=True).keys_ids((1, 2)) and not ChainIds().keys_ids(None)
    page = (7).to_bytes(8, "little") * 2  # one page of two tokens (7, 7), packed
    tokens = [7, 7, 7, 7]
    keys = [page, page]
    assert l3_page_keys(tokens, keys, 2, "chain64", ChainIds(bytes_keys=True)) == [0, 1]
    assert l3_page_keys(tokens, keys, 2, "chain64", ChainIds()) == chain_keys(keys)
    assert l3_page_keys(tokens, keys, 2, "sha256", ChainIds(bytes_keys=True)) == \
        chain_keys(keys)
    assert l3_page_keys(tokens, keys, 2, "chain64") == chain_keys(keys)
