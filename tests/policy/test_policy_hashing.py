"""Page-hash chain: the L3 key of page i covers its tokens and every token before it."""

import hashlib
import os
import struct
import subprocess
import sys
from array import array

import pytest

from hicache.tiers.hashing import PageHasher, chain_keys, page_hashes
from hicache.tree.pagekeys import page_keys

# Computed once (sha256 chain, int64 little-endian tokens) and pinned: changing the key
# scheme invalidates every L3 store, so this test must fail if the bytes hashed change.
PINNED = [
    "a1e03200f1f82ad2c1cec8795c271aaecf98f5aa2d151d2229ec5fa0c177cf77",
    "2516f6eea4abc53615737cbf4de98f921d434c2015fce74da094f421e1b0fad2",
]


def test_fixed_input_gives_the_pinned_keys():
    assert page_hashes(list(range(8)), 4) == PINNED


def test_key_is_sha256_of_previous_digest_and_int64_le_tokens():
    first = hashlib.sha256(struct.pack("<4q", 0, 1, 2, 3)).digest()
    second = hashlib.sha256(first + struct.pack("<4q", 4, 5, 6, 7)).hexdigest()
    assert page_hashes(range(8), 4) == [first.hex(), second]


def test_keys_are_equal_in_another_process_with_another_hash_seed():
    code = "from hicache.tiers.hashing import page_hashes; print(*page_hashes(range(8), 4))"
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=os.getcwd())
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == PINNED


def test_only_full_pages_get_keys():
    assert page_hashes(range(7), 4) == PINNED[:1]
    assert page_hashes(range(3), 4) == []


def test_a_page_key_depends_on_the_tokens_before_it():
    a = page_hashes([9, 9, 9, 9, 5, 6, 7, 8], 4)
    b = page_hashes([1, 9, 9, 9, 5, 6, 7, 8], 4)
    assert a[1] != b[1]  # same second page, different prefix


def test_large_token_ids_do_not_collide_with_their_low_bytes():
    assert page_hashes([256], 1) != page_hashes([0], 1)
    assert page_hashes([2**40], 1) != page_hashes([0], 1)


def test_prior_continues_a_chain():
    tail = page_hashes(range(4, 8), 4, prior=PINNED[0])
    assert tail == PINNED[1:]


def test_list_tuple_range_and_array_inputs_agree():
    toks = [3, 1, 4, 1, 5, 9, 2, 6]
    expect = page_hashes(toks, 2)
    assert page_hashes(tuple(toks), 2) == expect
    assert page_hashes(array("q", toks), 2) == expect


def test_bad_page_size_and_out_of_range_tokens_raise():
    with pytest.raises(ValueError):
        page_hashes([1, 2], 0)
    with pytest.raises(OverflowError):
        page_hashes([2**63], 1)


def test_page_hasher_extends_a_growing_conversation_to_the_same_chain():
    buf = array("q", range(1000))
    h = PageHasher(64)
    new = h.extend_to(buf[:100])
    assert len(new) == 1 and h.hashed_tokens == 64
    assert h.extend_to(buf[:127]) == []  # no new full page
    new = h.extend_to(buf[:1000])
    assert len(new) == 14
    assert list(h.keys) == page_hashes(buf, 64)
    assert h.keys_for(200) == tuple(page_hashes(buf[:200], 64))


def test_page_hasher_does_not_rehash_the_prefix():
    h = PageHasher(4)
    h.extend_to([0, 1, 2, 3])

    class OnlyTail(list):
        def __getitem__(self, i):
            assert isinstance(i, slice) and i.start >= 4, "rehashed the prefix"
            return list.__getitem__(self, i)

    assert h.extend_to(OnlyTail(range(8))) == PINNED[1:]


def test_page_hasher_rejects_a_shrunken_sequence():
    h = PageHasher(4)
    h.extend_to(range(8))
    with pytest.raises(ValueError, match="shrank"):
        h.extend_to(range(4))


def test_page_hasher_with_prior_matches_page_hashes_with_prior():
    h = PageHasher(4, prior=PINNED[0])
    assert h.extend_to(range(4, 8)) == PINNED[1:]


def test_chain_keys_of_packed_page_keys_are_the_page_hashes_of_their_tokens():
    tokens = [7 * i + 3 for i in range(5 * 4)]
    keys = page_keys(tokens, 4)  # bytes: the packed tokens of each page
    assert chain_keys(keys) == page_hashes(tokens, 4) == page_hashes(tokens, 4, None)
    head = page_hashes(tokens[:8], 4)
    assert chain_keys(keys[2:], head[-1]) == page_hashes(tokens, 4)[2:]
    assert chain_keys([]) == []
