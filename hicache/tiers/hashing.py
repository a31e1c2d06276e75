"""Page-hash chains: the L3 (storage) keys of KV pages (docs/SOURCES.md §2).

``key_i = sha256(raw(key_{i-1}) || tokens of page i as little-endian int64)``, with an empty
prefix for the first page of a sequence, rendered as 64 lowercase hex characters: SGLang's
keys (``cache.l3_key_scheme: sha256``). The ``chain64`` scheme (:func:`l3_page_keys`, the
simulator's default) keys integer page keys by :func:`chain64` instead, equal iff these are,
or, in a simulated run, by that run's dense :class:`ChainIds` (equal iff chain64's are).

Invariants: a key depends on the page's tokens *and* on every token before it (the chain);
keys are identical across processes and machines (hashlib only, fixed byte order, never
Python's ``hash()``); only full pages get keys (a partial tail page has none).

SHA-256 itself is most of the cost (about 0.8 us a page here; Python's overhead around it
is small), so what saves time is hashing fewer pages: a sequence keeps its own chain
(:class:`PageHasher`, conversations' buffers) and block prompts share theirs through a
:class:`BlockChains` memo (Mooncake traces: turns repeat their conversation's blocks).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Literal, TypeAlias

from hicache.runtime.interface import L3Key
from hicache.tree.pagekeys import pack_tokens

L3KeyScheme: TypeAlias = Literal["chain64", "sha256"]  # config.L3_KEY_SCHEMES
CHAIN64_SEED = 0x5EED_C4A1_6400  # chain64's "previous key" of a sequence's first page


def chain64(pages: Sequence[int], prior: int = CHAIN64_SEED) -> list[int]:
    """The ``chain64`` L3 keys of integer page keys (block prompts' first token ids):
    ``key_i = hash((key_{i-1}, page_i))`` from ``prior`` (the key of the page before, or
    :data:`CHAIN64_SEED` at a sequence's start).

    Equal iff the chains are, up to 64-bit hash collisions: Python hashes tuples of ints
    without a salt (unlike str and bytes, salted by PYTHONHASHSEED), so the keys are the
    same in every process and run of one Python version (the tuple hash may change between
    versions; keys never leave a run). For a fixed ``key_{i-1}`` the step is a bijection of
    the page key (CPython's xxHash-style tuple hash: add, rotate, multiply by odd
    constants; an int below 2**61 - 1 hashes to itself; only a -1 is remapped), so equal
    prefixes followed by different pages do not collide; different prefixes collide with
    about 2**-61 chance a pair (the previous key enters reduced mod 2**61 - 1): n keys,
    about n**2 / 2**62 (n = 2M pages: about 1e-6). A collision would make an L3 lookup
    hit where SHA-256's would miss, i.e. change a result; keys enter no result otherwise
    (they are only compared for equality).
    One hash of a 2-tuple a page, where :func:`page_hashes` costs a SHA-256 (~0.6 us)."""
    return [prior := hash((prior, k)) for k in pages]


class ChainIds:
    """Dense ids of page chains, for one run: the id of a page names its chain (the page
    keys from a sequence's start to it), so ids are equal iff the chains are (exactly:
    :func:`chain64`'s keys are, up to its collisions, and SHA-256's, up to its), and an id
    is content identity, never a page's place. Ids are given in turn from 0 as chains are
    first seen and never reused; a chain's new pages get consecutive ids, so a
    conversation's pages are close together wherever ids index (a store's hash table: an
    int's hash is itself). Integer page keys (block prompts) always take them where a run
    keeps ids; bytes page keys (conversations, token lists: :func:`page_hashes`' SHA-256
    chain otherwise) when ``bytes_keys`` (:func:`keys_ids`): an id depends on no hash
    value, so a salted ``hash`` of bytes never reaches a key, and comparing a known
    chain's page keys is mostly by identity (a conversation's buffer hands out the same
    key objects turn after turn: :class:`hicache.workload.request.BufferPages`).

    Invariants: each (parent id, page key) has one id; the ids made in one call past a
    known prefix form a batch ``start..end - 1`` (``_end``), each the child of the one
    before it, so a walk along a known chain compares a batch's page keys in one slice,
    not page by page; every other child is in ``_more`` (-1: the parent of first pages).
    A simulator keeps one per run, shared by its replicas (keys never leave a run)."""

    __slots__ = ("_page", "_end", "_more", "bytes_keys")

    def __init__(self, bytes_keys: bool = False) -> None:
        self._page: list[int | bytes] = []  # id -> its page key
        self._end: list[int] = []  # id -> the end of its batch (exclusive)
        self._more: dict[tuple[int, int | bytes], int] = {}  # (parent, page key) -> id
        self.bytes_keys = bytes_keys  # bytes page keys take ids too (else SHA-256)

    def __len__(self) -> int:
        return len(self._page)

    def ids(self, pages: Sequence[int] | Sequence[bytes], prior: int = -1) -> list[int]:
        """The ids of page keys ``pages`` (integers, or bytes: :meth:`keys_ids`) following
        the page whose id is ``prior`` (-1: a sequence's start), made where first seen (as
        one batch)."""
        if type(pages) is not list:
            pages = list(pages)
        page, end, more = self._page, self._end, self._more
        n, i, p = len(pages), 0, prior
        out: list[range] = []
        while i < n:
            k = pages[i]
            c = p + 1  # p's child in its batch, if any
            if not (p >= 0 and c < end[p] and page[c] == k):
                found = more.get((p, k))
                if found is None:  # the rest is new: one batch
                    c, m = len(page), n - i
                    page.extend(pages[i:] if i else pages)
                    end.extend([c + m] * m)
                    more[p, k] = c
                    out.append(range(c, c + m))
                    break
                c = found
            # along c's batch as far as the page keys agree (c's own does)
            e = min(end[c], c + n - i)
            m = e - c
            if page[c:e] != pages[i:i + m]:
                m = 1
                while page[c + m] == pages[i + m]:
                    m += 1
            out.append(range(c, c + m))
            i += m
            p = c + m - 1
        if len(out) == 1:
            return list(out[0])
        return list(chain.from_iterable(out))  # the batches' ids, in order (C-level)

    def keys_ids(self, first: object) -> bool:
        """Whether page keys like ``first`` (a sequence's first page key) take ids: an
        integer always, bytes when :attr:`bytes_keys` (:func:`l3_page_keys`,
        :class:`hicache.kvcache.keys.NodeKeys`)."""
        kind = type(first)
        return kind is int or (kind is bytes and self.bytes_keys)


def l3_page_keys(tokens: Sequence[int], pages: Sequence, page_size: int,
                 scheme: L3KeyScheme, ids: ChainIds | None = None) -> list[L3Key]:
    """The L3 keys of the full pages of ``tokens``, whose page keys
    (:func:`hicache.tree.pagekeys.page_keys`) are ``pages``: :func:`chain64` of integer
    page keys under ``chain64`` (their :class:`ChainIds` when the run keeps ``ids``:
    equal iff those are, as are those of bytes page keys when ``ids.bytes_keys``);
    :func:`page_hashes` (SHA-256) otherwise (``sha256``, and bytes page keys:
    conversations, plain token lists, which a salted ``hash`` cannot key).
    :class:`hicache.kvcache.keys.NodeKeys` makes the same choice per tree node."""
    if scheme == "chain64" and pages:
        if ids is not None and ids.keys_ids(pages[0]):
            # a conversation's buffer remembers its pages' ids (TokenView.page_ids)
            own = getattr(tokens, "page_ids", None) if type(pages[0]) is bytes else None
            got = own(ids, page_size) if own is not None else None
            return got if got is not None else ids.ids(pages)
        if type(pages[0]) is int:
            return chain64(pages)
    return page_hashes(tokens, page_size)


def _chain(data: bytes, page_size: int, prev: bytes) -> list[bytes]:
    """Digests of the full pages in ``data`` (packed tokens), chained from ``prev``: one
    hash of ``prev || page`` each (the bytes ``update`` would feed it, in one call; a
    comprehension, ``prev`` carried by assignment, as each digest is the next prefix)."""
    step = page_size * 8
    sha256 = hashlib.sha256
    return [prev := sha256(prev + data[start:start + step]).digest()
            for start in range(0, len(data) - step + 1, step)]


def _check_page_size(page_size: int) -> None:
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be an integer >= 1, got {page_size!r}")


def page_hashes(tokens: Sequence[int], page_size: int, prior: str | None = None) -> list[str]:
    """Hex keys of every full page of ``tokens``; ``prior`` is the key of the page just
    before ``tokens[0]`` (None at the start of a sequence). A sequence may keep its own
    chain (``page_hashes(page_size)``, extended as it grows: conversations)."""
    _check_page_size(page_size)
    if prior is None:
        own = getattr(tokens, "page_hashes", None)
        keys = own(page_size) if own is not None else None
        if keys is not None:
            return keys
    full = len(tokens) - len(tokens) % page_size
    if full == 0:
        return []
    prev = bytes.fromhex(prior) if prior is not None else b""
    return list(map(bytes.hex, _chain(pack_tokens(tokens[:full]), page_size, prev)))


def chain_keys(keys: Sequence[bytes], prior: str | None = None) -> list[str]:
    """The hash chain of pages given as bytes page keys (:mod:`hicache.tree.pagekeys`:
    the packed tokens the chain reads), without unpacking them."""
    prev = bytes.fromhex(prior) if prior is not None else b""
    sha256 = hashlib.sha256
    return list(map(bytes.hex, [prev := sha256(prev + key).digest() for key in keys]))


class PageHasher:
    """The key chain of one growing token sequence, extended without rehashing.

    ``extend_to(tokens)`` hashes only the full pages past those already hashed; the caller
    guarantees that the already-hashed prefix of ``tokens`` is unchanged (as for the
    append-only conversation buffers of :mod:`hicache.workload.request`).
    """

    __slots__ = ("page_size", "_keys", "_last")

    def __init__(self, page_size: int, prior: str | None = None) -> None:
        _check_page_size(page_size)
        self.page_size = page_size
        self._keys: list[str] = []
        self._last = bytes.fromhex(prior) if prior is not None else b""

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._keys)

    @property
    def num_pages(self) -> int:
        return len(self._keys)

    @property
    def hashed_tokens(self) -> int:
        return len(self._keys) * self.page_size

    def extend_to(self, tokens: Sequence[int]) -> list[str]:
        """Hash the new full pages of ``tokens`` (the whole sequence so far); return their keys."""
        done = self.hashed_tokens
        if len(tokens) < done:
            raise ValueError(f"sequence shrank: {len(tokens)} tokens < {done} already hashed")
        full = len(tokens) - len(tokens) % self.page_size
        if full == done:
            return []
        digests = _chain(pack_tokens(tokens[done:full]), self.page_size, self._last)
        self._last = digests[-1]
        new = list(map(bytes.hex, digests))
        self._keys.extend(new)
        return new

    def keys_for(self, num_tokens: int) -> tuple[str, ...]:
        """Keys of the full pages among the first ``num_tokens`` tokens (already hashed)."""
        n = num_tokens // self.page_size
        if n > len(self._keys):
            raise ValueError(f"only {self.hashed_tokens} tokens hashed, asked for {num_tokens}")
        return tuple(self._keys[:n])


MEMO_BLOCKS = 1 << 17  # blocks a BlockChains keeps before it starts over (a miss rehashes)


class BlockChains:
    """The page-hash chains of block prompts (:class:`hicache.workload.tokens.BlockTokens`:
    block ``k`` with id ``h`` holds the tokens ``h * block + j``), memoised per block.

    Block ``k``'s pages, hence their keys, follow from the chain before it and its own id:
    the memo maps (the node of blocks ``0..k-1``, id of block ``k``) to a node holding the
    keys of that block's pages hashed so far (all of them, or the full pages of a
    prompt's partial last block, extended when a longer prompt asks) and its last digest.
    A prompt's keys are then its memoised leading blocks' keys, plus the pages past them
    hashed once (from the last memoised digest) and memoised in turn.

    Invariants: :meth:`page_hashes` returns, bit for bit, :func:`page_hashes` of the
    prompt's tokens; node ids are never reused, so a memo emptied (when it holds more than
    ``limit`` blocks) only costs rehashing, never a wrong key; one instance serves one
    block size (the trace's), any page size dividing it. SHA-256 dominates: a plain dict
    and a wholesale reset cost less per block than least-recently-used bookkeeping.
    """

    __slots__ = ("block", "limit", "_memo", "_next", "hashed_pages")

    def __init__(self, block: int, limit: int = MEMO_BLOCKS) -> None:
        if block < 1 or limit < 1:
            raise ValueError(f"block ({block}) and limit ({limit}) must be >= 1")
        self.block, self.limit = block, limit
        # page size -> {_key(parent node id, block id): (node id, keys, last digest)}:
        # int keys and tuples of atoms, which the garbage collector stops tracking (the
        # memo's lists and tuple keys made its collections cost more than hits saved)
        self._memo: dict[int, dict[int, tuple[int, tuple[str, ...], bytes]]] = {}
        self._next = 1  # node ids; 0 is the empty prefix
        self.hashed_pages = 0  # pages hashed so far (the rest came from the memo)

    def page_hashes(self, ids: Sequence[int], length: int, page_size: int,
                    packed: Callable[[int, int], bytes]) -> list[str] | None:
        """Keys of the full pages of the ``length``-token prompt of block ids ``ids``
        (a new list); ``packed(start, stop)`` gives its tokens ``start:stop`` packed
        (:func:`hicache.tree.pagekeys.pack_tokens`). None when ``page_size`` does not
        divide the block (pages would straddle blocks)."""
        _check_page_size(page_size)
        per, rem = divmod(self.block, page_size)
        if rem:
            return None
        memo = self._memo.get(page_size)
        if memo is None:
            memo = self._memo[page_size] = {}
        n_pages = length // page_size
        n_blocks = -(-n_pages // per)  # blocks holding at least one full page
        last = n_blocks - 1
        out: list[str] = []
        parent, prev, k, node = 0, b"", 0, None
        get = memo.get
        while k < n_blocks:  # memoised leading blocks
            node = get(parent << 64 | ids[k] & _MASK)
            if node is None:
                break
            keys = node[1]
            if k < last:
                if len(keys) < per:
                    break
                out += keys
            else:
                want = n_pages - k * per
                if len(keys) < want:
                    break
                out += keys if want == per else keys[:want]
            parent, prev, node = node[0], node[2], None
            k += 1
        if k == n_blocks:
            return out
        have = 0
        if node is not None:  # block k partly hashed: go on from its last page
            have, prev = len(node[1]), node[2]
            out += node[1]
        start = k * self.block + have * page_size
        digests = _chain(packed(start, n_pages * page_size), page_size, prev)
        self.hashed_pages += len(digests)
        new = list(map(bytes.hex, digests))
        out += new
        if len(memo) + n_blocks - k > self.limit:
            memo.clear()  # start over (class doc)
        n = len(new)
        lo = 0  # new[lo:] are the pages of blocks k, k + 1, ... from page ``have`` of k
        while lo < n:
            hi = lo + per - have
            end = hi if hi < n else n
            key = parent << 64 | ids[k] & _MASK
            if node is not None:  # the partly hashed block: extend it
                node_id = node[0]
                memo[key] = (node_id, node[1] + tuple(new[lo:end]), digests[end - 1])
            else:
                node_id = self._next
                self._next += 1
                memo[key] = (node_id, tuple(new[lo:end]), digests[end - 1])
            parent, node, have, lo, k = node_id, None, 0, hi, k + 1
        return out


_MASK = (1 << 64) - 1  # a block id as 64 bits beside its parent's node id: one int key
