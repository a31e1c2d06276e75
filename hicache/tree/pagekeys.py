"""Page keys: what the radix tree compares, one hashable value per full page of tokens.

A page's key is the bytes of its token ids as little-endian int64 (``8 * page_size``
bytes): equal iff the tokens are, hashed once (Python caches a bytes hash), compared with
one ``memcmp``, and the very bytes the L3 page-hash chain reads (:mod:`hicache.tiers.
hashing`), so keys of a cached span hash without unpacking tokens. A token sequence may
supply its own keys through a ``page_keys(page_size)`` method: Mooncake block prompts give
each page's first token id (its ids are consecutive, so equal iff the tokens are; nothing
materialised), conversations their
buffer's keys, each page built once for the conversation's whole life
(:class:`hicache.workload.request.BufferPages`). Feed one tree one representation.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

_LITTLE = sys.byteorder == "little"


def pack_tokens(tokens: Sequence[int]) -> bytes:
    """Tokens as fixed-width little-endian int64 bytes (OverflowError outside int64)."""
    arr = tokens if isinstance(tokens, array) and tokens.typecode == "q" else array("q", tokens)
    if not _LITTLE:
        arr = array("q", arr)
        arr.byteswap()
    return arr.tobytes()


def split_pages(data: bytes, page_size: int) -> list[bytes]:
    """Packed tokens -> one key per full page (a trailing partial page is dropped)."""
    step = 8 * page_size
    return [data[i:i + step] for i in range(0, len(data) - step + 1, step)]


def page_keys(tokens: Sequence[int], page_size: int) -> list:
    """Full pages of ``tokens`` as keys (module doc); a trailing partial page is dropped."""
    own = getattr(tokens, "page_keys", None)
    if own is not None:
        keys = own(page_size)
        if keys is not None:
            return keys
    n = len(tokens) // page_size
    return split_pages(pack_tokens(tokens[: n * page_size]), page_size)


def key_tokens(key: bytes) -> array:
    """The token ids a bytes page key holds."""
    out = array("q")
    out.frombytes(key)
    if not _LITTLE:
        out.byteswap()
    return out
