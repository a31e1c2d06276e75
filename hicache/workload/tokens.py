"""Compact token sequences for workloads.

Invariants:

- :func:`draw_tokens` gives ids of namespace ``ns`` in ``[(ns + 1) * 2**32, (ns + 2) * 2**32)``,
  so two namespaces (clients, sessions, documents) never share a token id; ids stay below
  2**63 and fit ``array('q')``. Draws come only from the ``random.Random`` passed in.
- :class:`BlockTokens` is a Mooncake-style prompt: block ``k`` with hash id ``b`` holds
  tokens ``b * block + j`` for ``j`` in ``0..block-1``; only the last block may be partial.
  Two prompts sharing hash id ``b`` at block ``k`` therefore share those tokens. Prompts
  built with one :class:`hicache.tiers.hashing.BlockChains` (a trace's) share its memo of
  page-hash chains: a block hashed for one is not hashed again for another.
- :class:`ConcatTokens` is ``prefix + suffix`` without copying the shared prefix.

Slicing any of them returns an ``array('q')`` (like :class:`TokenView`); slicing is cheap
(cost proportional to the slice, not to the whole prompt).
"""

from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from hicache.tiers.hashing import BlockChains

NAMESPACE_BITS = 32
MAX_NAMESPACE = 2**30  # (ns + 2) << 32 stays below 2**63
_LOW = 0 if sys.byteorder == "little" else 1


def draw_tokens(rng: random.Random, namespace: int, n: int) -> array:
    """``n`` random token ids of ``namespace`` (see module invariant), as ``array('q')``."""
    if not 0 <= namespace < MAX_NAMESPACE:
        raise ValueError(f"namespace {namespace} outside [0, {MAX_NAMESPACE})")
    if n < 0:
        raise ValueError(f"cannot draw {n} tokens")
    # token i is (namespace + 1) << 32 | word i of randbytes(4 * n) (native-endian 32-bit
    # words): 32-bit halves, the high ones repeated (memcpy), the low ones written with one
    # strided array copy (cheaper than a memoryview's, which goes through a scratch copy),
    # then the halves' bytes read as int64s
    halves = array("I", (0, namespace + 1) if _LOW == 0 else (namespace + 1, 0)) * n
    halves[_LOW::2] = array("I", rng.randbytes(4 * n))
    return array("q", halves.tobytes())


def namespace_of(token: int) -> int:
    """The namespace a token drawn by :func:`draw_tokens` belongs to."""
    return (token >> NAMESPACE_BITS) - 1


class LazyTokens(Sequence[int]):
    """Indexing and slicing for a token sequence built on demand.

    Subclasses give ``__len__``, ``_range(start, stop)`` (tokens ``start:stop`` as an
    ``array('q')``, ``0 <= start <= stop <= len``) and ``_at(i)`` (``0 <= i < len``);
    every index and slice is normalised here, once.
    """

    __slots__ = ()

    def _range(self, start: int, stop: int) -> array:
        raise NotImplementedError

    def _at(self, i: int) -> int:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i):  # type: ignore[override]
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step == 1:
                return self._range(start, max(start, stop))
            return self._range(0, n)[i]
        if not -n <= i < n:
            raise IndexError(i)
        return self._at(i % n)


class BlockTokens(LazyTokens):
    """Prompt of ``length`` tokens built lazily from per-block hash ids; ``chains``: the
    page-hash memo it shares with the other prompts of its trace (its block size)."""

    __slots__ = ("_ids", "_len", "_block", "_keys", "_chains")

    def __init__(self, hash_ids: array, length: int, block: int = 512,
                 chains: BlockChains | None = None) -> None:
        n = len(hash_ids)
        if block <= 0 or length < 0 or n != -(-length // block):
            raise ValueError(f"{n} blocks of {block} cannot hold exactly {length} tokens")
        if chains is not None and chains.block != block:
            raise ValueError(f"a memo of {chains.block}-token blocks for blocks of {block}")
        self._ids = hash_ids
        self._len = length
        self._block = block
        self._keys: tuple[int, list[int]] | None = None  # (page size, keys): built once
        self._chains = chains

    @property
    def hash_ids(self) -> array:
        return self._ids

    def __len__(self) -> int:
        return self._len

    def _range(self, start: int, stop: int) -> array:
        """Tokens ``start:stop``, built block-wise in numpy (C speed, no Python ints)."""
        out = array("q")
        if stop <= start:
            return out
        out.frombytes(self._grid(start, stop).astype("=i8", copy=False).tobytes())
        return out

    def _packed(self, start: int, stop: int) -> bytes:
        """Tokens ``start:stop`` packed as :func:`hicache.tree.pagekeys.pack_tokens`
        packs them (little-endian int64), straight from numpy: what the page-hash chain
        reads, without an ``array`` in between."""
        if stop <= start:
            return b""
        return self._grid(start, stop).astype("<i8", copy=False).tobytes()

    def _grid(self, start: int, stop: int) -> Any:
        """Tokens ``start:stop`` (``start < stop``) as a numpy int64 vector."""
        import numpy as np  # lazily: the CLI's --help and scenario checks never need it

        b = self._block
        k0, k1 = start // b, (stop - 1) // b
        bases = np.asarray(self._ids[k0:k1 + 1], dtype=np.int64) * b
        grid = (bases[:, None] + np.arange(b, dtype=np.int64)[None, :]).ravel()
        return grid[start - k0 * b: stop - k0 * b]

    def _at(self, i: int) -> int:
        k, off = divmod(i, self._block)
        return self._ids[k] * self._block + off

    def page_keys(self, page_size: int) -> list[int] | None:
        """Page keys without materialising tokens: each full page's first token id (the
        page holds that id and the ``page_size - 1`` after it, so keys are equal iff the
        tokens are). None when pages would straddle blocks. Built once, a range per block
        (as fast as numpy, which a replay without L3 then never imports), and shared:
        callers must not change the list."""
        b = self._block
        if b % page_size:
            return None
        if self._keys is not None and self._keys[0] == page_size:
            return self._keys[1]  # the scheduler and every router view ask: build once
        keys: list[int] = []
        extend = keys.extend
        for h in self._ids:
            extend(range(h * b, h * b + b, page_size))
        del keys[self._len // page_size:]
        self._keys = (page_size, keys)
        return keys

    def drop_page_keys(self) -> None:
        """Forget the page keys :meth:`page_keys` built (the request that asked is done;
        :meth:`hicache.kvcache.state.RequestState.forget`): a finished prompt holds no
        list of them for the rest of the run. A later ask builds them again, equal."""
        self._keys = None

    def page_hashes(self, page_size: int) -> list[str] | None:
        """The page-hash chain of the full pages (:func:`hicache.tiers.hashing.
        page_hashes`), from the shared memo; None without one, or when pages would
        straddle blocks."""
        if self._chains is None:
            return None
        return self._chains.page_hashes(self._ids, self._len, page_size, self._packed)

    def __iter__(self) -> Iterator[int]:
        b = self._block
        for k, h in enumerate(self._ids):
            yield from range(h * b, h * b + min(b, self._len - k * b))


class ConcatTokens(LazyTokens):
    """``prefix + suffix``; the prefix (an array, or any sequence whose slices are arrays)
    is shared, not copied."""

    __slots__ = ("_prefix", "_suffix")

    def __init__(self, prefix: Sequence[int], suffix: array) -> None:
        self._prefix = prefix
        self._suffix = suffix

    def __len__(self) -> int:
        return len(self._prefix) + len(self._suffix)

    def _range(self, start: int, stop: int) -> array:
        p = len(self._prefix)
        out = self._prefix[min(start, p) : min(stop, p)]
        out.extend(self._suffix[max(start - p, 0) : max(stop - p, 0)])
        return out

    def _at(self, i: int) -> int:
        p = len(self._prefix)
        return self._prefix[i] if i < p else self._suffix[i - p]

    def __iter__(self) -> Iterator[int]:
        yield from self._prefix
        yield from self._suffix
