"""Page-hash chains: the L3 (storage) keys of KV pages (docs/SOURCES.md §2).

``key_i = sha256(raw(key_{i-1}) || tokens of page i as little-endian int64)``, with an empty
prefix for the first page of a sequence, rendered as 64 lowercase hex characters.

Invariants: a key depends on the page's tokens *and* on every token before it (the chain);
keys are identical across processes and machines (hashlib only, fixed byte order, never
Python's ``hash()``); only full pages get keys (a partial tail page has none).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from hicache.tree.pagekeys import pack_tokens


def _chain(data: bytes, page_size: int, prev: bytes) -> list[bytes]:
    """Digests of the full pages in ``data`` (packed tokens), chained from ``prev``."""
    step = page_size * 8
    view = memoryview(data)
    out: list[bytes] = []
    for start in range(0, len(data) - step + 1, step):
        h = hashlib.sha256(prev)
        h.update(view[start : start + step])
        prev = h.digest()
        out.append(prev)
    return out


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
    return [d.hex() for d in _chain(pack_tokens(tokens[:full]), page_size, prev)]


def chain_keys(keys: Sequence[bytes], prior: str | None = None) -> list[str]:
    """The hash chain of pages given as bytes page keys (:mod:`hicache.tree.pagekeys`:
    the packed tokens the chain reads), without unpacking them."""
    prev = bytes.fromhex(prior) if prior is not None else b""
    out = []
    sha256 = hashlib.sha256
    for key in keys:
        h = sha256(prev)
        h.update(key)
        prev = h.digest()
        out.append(prev.hex())
    return out


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
        new = [d.hex() for d in digests]
        self._keys.extend(new)
        return new

    def keys_for(self, num_tokens: int) -> tuple[str, ...]:
        """Keys of the full pages among the first ``num_tokens`` tokens (already hashed)."""
        n = num_tokens // self.page_size
        if n > len(self._keys):
            raise ValueError(f"only {self.hashed_tokens} tokens hashed, asked for {num_tokens}")
        return tuple(self._keys[:n])
