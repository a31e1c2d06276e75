"""Token sequences: namespaced random draws, lazy block tokens, prefix concatenation."""

from __future__ import annotations

import hashlib
import random
import struct
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache.workload.tokens import BlockTokens, ConcatTokens, draw_tokens, namespace_of


def test_draws_are_deterministic_and_namespaced():
    a = draw_tokens(random.Random(1), 5, 1000)
    assert a == draw_tokens(random.Random(1), 5, 1000)
    assert a != draw_tokens(random.Random(2), 5, 1000)
    assert {namespace_of(t) for t in a} == {5}
    assert {namespace_of(t) for t in draw_tokens(random.Random(1), 6, 1000)} == {6}
    assert a.typecode == "q" and len(set(a)) > 990  # random, not constant
    assert len(draw_tokens(random.Random(1), 0, 0)) == 0


def test_draws_are_pinned():
    """The exact ids (every workload's prompts, fingerprints, caches keyed by them)."""
    a = draw_tokens(random.Random(1), 5, 1000)
    assert hashlib.sha256(a.tobytes()).hexdigest() == (
        "641096f6645c329d6d2d224cf55d8ee3f03ef7104d0d512730946d6cefc18170")


@given(seed=st.integers(0, 2**64), ns=st.integers(0, 2**30 - 1), n=st.integers(0, 300))
def test_draws_match_their_definition(seed, ns, n):
    """Token i is ``(ns + 1) << 32 | w_i``, ``w`` the native 32-bit words of
    ``randbytes(4 * n)``, and the stream goes on as after that one draw."""
    rng, ref = random.Random(seed), random.Random(seed)
    words = struct.unpack(f"={n}I", ref.randbytes(4 * n))
    assert list(draw_tokens(rng, ns, n)) == [(ns + 1) << 32 | w for w in words]
    assert rng.random() == ref.random()


def test_namespace_bounds():
    with pytest.raises(ValueError):
        draw_tokens(random.Random(1), -1, 3)
    with pytest.raises(ValueError):
        draw_tokens(random.Random(1), 2**30, 3)


slices = st.tuples(st.none() | st.integers(-40, 40), st.none() | st.integers(-40, 40),
                   st.none() | st.integers(1, 4) | st.integers(-4, -1))


@given(ids=st.lists(st.integers(0, 50), min_size=1, max_size=5), cut=st.integers(0, 7),
       sl=slices, i=st.integers(-45, 45))
def test_block_tokens_match_naive_expansion(ids, cut, sl, i):
    length = (len(ids) - 1) * 8 + 1 + cut  # last block holds 1..8 tokens
    toks = BlockTokens(array("q", ids), length, block=8)
    naive = [h * 8 + j for h in ids for j in range(8)][:length]
    assert len(toks) == length and list(toks) == naive
    s = slice(*sl)
    assert list(toks[s]) == naive[s]
    if -length <= i < length:
        assert toks[i] == naive[i]
    else:
        with pytest.raises(IndexError):
            toks[i]


def test_slices_are_arrays_of_int64():
    for toks in (BlockTokens(array("q", [3, 4]), 12, block=8),
                 ConcatTokens(array("q", [1, 2]), array("q", [7]))):
        assert all(type(t) is array and t.typecode == "q" for t in (toks[1:3], toks[::-2]))


def test_block_tokens_reject_inconsistent_length():
    with pytest.raises(ValueError):
        BlockTokens(array("q", [1, 2]), 17, block=8)


@given(p=st.lists(st.integers(0, 9), max_size=6), q=st.lists(st.integers(0, 9), max_size=6),
       sl=slices, i=st.integers(-15, 15))
def test_concat_tokens_match_list_concatenation(p, q, sl, i):
    toks = ConcatTokens(array("q", p), array("q", q))
    naive = p + q
    assert len(toks) == len(naive) and list(toks) == naive
    assert list(toks[slice(*sl)]) == naive[slice(*sl)]
    if -len(naive) <= i < len(naive):
        assert toks[i] == naive[i]
    else:
        with pytest.raises(IndexError):
            toks[i]


def test_a_forked_view_keys_and_hashes_its_pages_as_the_plain_tokens_would() -> None:
    """ForkedView: the base's full pages come from the buffer's cache, the rest are packed
    and hashed from the fork's own tokens; both match a plain sequence of the same ids."""
    from array import array

    from hicache.tiers.hashing import page_hashes
    from hicache.tree.pagekeys import page_keys
    from hicache.workload.request import BufferPages, ForkedView, TokenView

    buf = array("q", range(1, 22))
    pages = BufferPages(buf)
    base = TokenView(buf, 10, pages)
    fork = ForkedView(base, array("q", range(100, 107)))
    plain = list(range(1, 11)) + list(range(100, 107))
    assert list(fork) == plain and len(fork) == 17
    assert list(fork[3:14]) == plain[3:14] and fork[-1] == 106 and fork[12] == 102
    for ps in (1, 3, 4, 16):
        assert fork.page_keys(ps) == page_keys(plain, ps)
        assert fork.page_hashes(ps) == page_hashes(plain, ps)
    assert list(fork.prefix(12)) == plain[:12]
    assert fork.prefix(12).page_keys(4) == page_keys(plain[:12], 4)
    assert isinstance(fork.prefix(8), TokenView)  # within the base: the base's own view


@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=8),
       fork=st.integers(0, 40), ps=st.sampled_from([1, 3, 4, 16]), fresh=st.booleans())
def test_page_ids_are_the_chain_ids_of_the_page_keys(lengths, fork, ps, fresh) -> None:
    """A buffer's views (and a fork of one) give the ids ChainIds gives their page keys,
    in any order of lengths (the buffer remembers the ids asked before); a view asked
    under another ChainIds (another run) starts afresh there."""
    from hicache.tiers.hashing import ChainIds
    from hicache.tree.pagekeys import page_keys
    from hicache.workload.request import BufferPages, ForkedView, TokenView

    rng = random.Random(7)
    buf = array("q", [rng.randrange(3) for _ in range(40)])
    pages = BufferPages(buf)
    ids, naive = ChainIds(bytes_keys=True), ChainIds(bytes_keys=True)
    for n in lengths:
        view = TokenView(buf, n, pages)
        assert view.page_ids(ids, ps) == naive.ids(page_keys(list(buf[:n]), ps))
    base = TokenView(buf, min(fork, 40), pages)
    forked = ForkedView(base, array("q", [5, 6, 7] * 5))
    plain = list(buf[:len(base)]) + [5, 6, 7] * 5
    assert forked.page_ids(ids, ps) == naive.ids(page_keys(plain, ps))
    other = ChainIds(bytes_keys=True)  # another run's: its own ids, from 0
    n = max(lengths)
    if fresh:
        assert TokenView(buf, n, pages).page_ids(other, ps) == other.ids(
            page_keys(list(buf[:n]), ps))
        assert len(other) == n // ps
    assert TokenView(buf, n, None).page_ids(ids, ps) is None


@given(seed=st.integers(0, 2**64), ns=st.integers(0, 2**30 - 1),
       sizes=st.lists(st.integers(0, 200), min_size=1, max_size=4))
def test_consecutive_draws_are_one_draw_of_their_sum(seed, ns, sizes):
    """What :meth:`Conversation.turn` relies on to draw a turn's tokens at once: draws of
    a, b, ... tokens give the tokens of one draw of a + b + ..., and leave the stream in
    the same place."""
    rng, ref = random.Random(seed), random.Random(seed)
    apart = array("q")
    for n in sizes:
        apart.extend(draw_tokens(rng, ns, n))
    assert draw_tokens(ref, ns, sum(sizes)) == apart
    assert rng.getstate() == ref.getstate()
