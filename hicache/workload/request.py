"""What a workload hands the scheduler: requests, and follow-ups when requests finish.

A workload is a synchronous state machine like the scheduler (no clock, no simpy)::

    wl = make_workload(spec, seed)
    pending = wl.start()                 # requests whose arrival is known up front
    ... when rid finishes at time now:
    pending += wl.on_finished(rid, now)  # e.g. the client's next turn, arrival >= now

Token ids: ``Request.tokens`` is any ``Sequence[int]`` supporting ``len`` and slicing.
Long multi-turn conversations share one growing buffer (:class:`TokenView`) so that
N turns of a conversation cost O(final length) memory, not O(N * length).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, overload

from hicache.tiers.hashing import ChainIds, chain_keys
from hicache.tree.pagekeys import pack_tokens, split_pages
from hicache.workload.tokens import ConcatTokens


class BufferPages:
    """Page keys and page-hash chains of one append-only token buffer, per page size,
    extended as the buffer grows: each page is packed and hashed once for the buffer's
    whole life, not once per turn (a conversation's turns share its buffer); likewise
    its pages' ids in a run's :class:`~hicache.tiers.hashing.ChainIds` (each page's id
    asked once, not its whole chain walked again per turn)."""

    __slots__ = ("_buf", "_keys", "_hashes", "_ids")

    def __init__(self, buf: array) -> None:
        self._buf = buf
        self._keys: dict[int, list[bytes]] = {}
        self._hashes: dict[int, list[str]] = {}
        self._ids: dict[int, tuple[ChainIds, list[int]]] = {}  # page size -> (ids, chain)

    def keys(self, page_size: int, n: int) -> list[bytes]:
        """Keys of the first ``n`` pages (:mod:`hicache.tree.pagekeys`)."""
        keys = self._keys.setdefault(page_size, [])
        have = len(keys)
        if have < n:
            raw = pack_tokens(self._buf[have * page_size:n * page_size])
            keys.extend(split_pages(raw, page_size))
        return keys[:n]

    def hashes(self, page_size: int, n: int) -> list[str]:
        """The page-hash chain of the first ``n`` pages (:mod:`hicache.tiers.hashing`)."""
        chain = self._hashes.setdefault(page_size, [])
        have = len(chain)
        if have < n:
            keys = self.keys(page_size, n)
            chain.extend(chain_keys(keys[have:], chain[-1] if chain else None))
        return chain[:n]

    def ids(self, chain_ids: ChainIds, page_size: int, n: int) -> list[int]:
        """The ids in ``chain_ids`` of the first ``n`` pages' keys: ``chain_ids.ids(
        self.keys(page_size, n))``, the pages asked before remembered (ids of a chain's
        pages are fixed for the ChainIds' life; another ChainIds starts afresh)."""
        memo = self._ids.get(page_size)
        if memo is None or memo[0] is not chain_ids:
            memo = self._ids[page_size] = (chain_ids, [])
        chain = memo[1]
        have = len(chain)
        if have < n:
            keys = self.keys(page_size, n)
            chain.extend(chain_ids.ids(keys[have:], chain[-1] if chain else -1))
        return chain[:n]


class TokenView(Sequence[int]):
    """The first ``length`` tokens of a shared append-only ``array('q')`` buffer; with
    ``pages``, that buffer's :class:`BufferPages` (page keys and hashes come from it)."""

    __slots__ = ("_buf", "_len", "_pages")

    def __init__(self, buf: array, length: int, pages: BufferPages | None = None) -> None:
        if length > len(buf):
            raise ValueError(f"view of {length} tokens over a buffer of {len(buf)}")
        self._buf = buf
        self._len = length
        self._pages = pages

    def prefix(self, n: int) -> TokenView:
        """The first ``n`` tokens, a view sharing this one's buffer and pages."""
        return TokenView(self._buf, min(max(n, 0), self._len), self._pages)

    def page_keys(self, page_size: int) -> list[bytes] | None:
        if self._pages is None:
            return None
        return self._pages.keys(page_size, self._len // page_size)

    def page_hashes(self, page_size: int) -> list[str] | None:
        if self._pages is None:
            return None
        return self._pages.hashes(page_size, self._len // page_size)

    def page_ids(self, chain_ids: ChainIds, page_size: int) -> list[int] | None:
        """The ids of the full pages' keys in ``chain_ids`` (:meth:`BufferPages.ids`);
        None without a buffer's pages."""
        if self._pages is None:
            return None
        return self._pages.ids(chain_ids, page_size, self._len // page_size)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            return self._buf[start:stop:step]
        if not -self._len <= i < self._len:
            raise IndexError(i)
        return self._buf[i % self._len]


class ForkedView(ConcatTokens):
    """``base`` (a :class:`TokenView`) followed by ``tail``, tokens its buffer does not
    hold: a turn's KV when the next prompt does not carry the turn's output (the buffer
    goes on differently after ``base``), so the tree forks at the end of ``base``.

    Indexing and slicing are :class:`ConcatTokens`'s. Page keys and hashes of ``base``'s
    full pages come from its buffer's :class:`BufferPages`; only the pages from there on
    are packed and hashed here."""

    __slots__ = ()

    def __init__(self, base: TokenView, tail: array) -> None:
        super().__init__(base, tail)

    def prefix(self, n: int) -> Sequence[int]:
        """The first ``n`` tokens (``base``'s own view when they end within it)."""
        base = self._prefix
        b = len(base)
        if n <= b:
            return base.prefix(n)
        return ForkedView(base, self._suffix[:n - b])

    def page_keys(self, page_size: int) -> list[bytes] | None:
        head = self._prefix.page_keys(page_size)
        if head is None:
            return None
        rest = self[len(head) * page_size:(len(self) // page_size) * page_size]
        return head + split_pages(pack_tokens(rest), page_size)

    def page_hashes(self, page_size: int) -> list[str] | None:
        head = self._prefix.page_hashes(page_size)
        keys = self.page_keys(page_size)
        if head is None or keys is None:
            return None
        return head + chain_keys(keys[len(head):], head[-1] if head else None)

    def page_ids(self, chain_ids: ChainIds, page_size: int) -> list[int] | None:
        """``base``'s page ids (its buffer's memo), then the ids of the pages from there
        on, continued from its last."""
        head = self._prefix.page_ids(chain_ids, page_size)
        keys = self.page_keys(page_size)
        if head is None or keys is None:
            return None
        return head + chain_ids.ids(keys[len(head):], head[-1] if head else -1)


def token_prefix(tokens: Sequence[int], n: int) -> Sequence[int]:
    """The first ``n`` tokens, keeping the sequence's own page keys and hashes if it has a
    cheap prefix (:meth:`TokenView.prefix`), else a slice."""
    prefix = getattr(tokens, "prefix", None)
    return prefix(n) if prefix is not None else tokens[:n]


@dataclass(frozen=True, slots=True)
class Request:
    """One request. ``arrival`` is seconds from the run's start."""

    rid: int
    arrival: float
    tokens: Sequence[int]
    output_len: int
    session_id: str | None = None
    client: int = -1
    round: int = -1
    close_session: bool = False  # close ``session_id`` when this request finishes
    # prompt + generated output, when the workload knows the output (conversations do):
    # lets the cache keep the output's KV for the next turn, as SGLang does
    full_tokens: Sequence[int] | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.tokens)


class Workload(Protocol):
    def start(self) -> list[Request]: ...

    def on_finished(self, rid: int, now: float) -> list[Request]: ...
