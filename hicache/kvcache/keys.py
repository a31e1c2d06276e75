"""L3 keys of tree nodes: the page-hash chain of the tokens from the root to each page.

Under the ``chain64`` scheme integer page keys (block prompts) chain as
:func:`hicache.tiers.hashing.chain64` (or the run's :class:`~hicache.tiers.hashing.ChainIds`,
which take bytes page keys too when their ``bytes_keys`` says so), other page keys as
SHA-256, the choice :func:`hicache.tiers.hashing.l3_page_keys` makes for a request's tokens.
A node's page keys are its tokens (packed bytes, first ids of block pages, or tuples), so a
node's L3 keys follow from its path. The last key of each node is memoized by node id: a
node's end never moves (a split gives the *upper* part a new id, the lower part keeps its
id and its end), and ids are never reused, so a memoized key stays right for as long as
the node lives.
Hashing a span then costs its own pages plus any ancestors not seen before.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

from hicache.tiers.hashing import (
    CHAIN64_SEED,
    ChainIds,
    L3Key,
    L3KeyScheme,
    chain64,
    chain_keys,
    page_hashes,
)
from hicache.tree.node import Node

MEMO_NODES = 1 << 16  # last keys kept (LRU); a miss only costs rehashing from an ancestor


class NodeKeys:
    def __init__(self, page_size: int, scheme: L3KeyScheme = "sha256") -> None:
        self.page = page_size
        self.chain64 = scheme == "chain64"
        self._last: OrderedDict[int, L3Key] = OrderedDict()  # node id -> key of its last page
        self.ids: ChainIds | None = None  # the run's chain ids, if it keeps them (chain64)

    def span(self, nodes: list[Node]) -> tuple[L3Key, ...]:
        """The keys of the pages of consecutive ``nodes`` (a path segment, top first)."""
        todo = nodes[::-1]  # bottom-up: the span, then ancestors up to a known end
        prior: L3Key | None = None
        n = nodes[0].parent
        while n is not None and n.parent is not None:
            known = self._last.get(n.id)
            if known is not None:
                prior = known
                self._last.move_to_end(n.id)
                break
            todo.append(n)
            n = n.parent
        todo.reverse()
        out: list[L3Key] = []
        for node in todo:
            first = node.key[0] if node.key else None
            if self.chain64 and self.ids is not None and self.ids.keys_ids(first):
                # block prompts' first token ids, or packed tokens where the run's ids
                # take them too (a chain id: an int, as the memo holds)
                keys = self.ids.ids(node.key, -1 if prior is None else prior)  # type: ignore[arg-type]
            elif self.chain64 and type(first) is int:  # block prompts' first token ids
                keys = chain64(node.key, CHAIN64_SEED if prior is None else prior)
            elif isinstance(first, bytes):  # packed tokens already
                keys = chain_keys(node.key, prior)
            else:
                keys = page_hashes(self._tokens(node.key), self.page, prior)
            prior = keys[-1]
            self._remember(node.id, prior)
            out.extend(keys)
        span = sum(x.num_pages for x in nodes)
        return tuple(out[len(out) - span:])

    def _tokens(self, pages: Sequence) -> array:
        """The token ids of page keys (first token ids, as block prompts give, or
        tuples)."""
        import numpy as np  # lazily: the CLI's --help and scenario checks never need it

        if pages and isinstance(pages[0], int):
            starts = np.asarray(pages, dtype=np.int64)
            grid = starts[:, None] + np.arange(self.page, dtype=np.int64)[None, :]
        else:
            grid = np.asarray(pages, dtype=np.int64)
        out = array("q")
        out.frombytes(np.ascontiguousarray(grid, dtype="<i8").tobytes())
        return out

    def _remember(self, node_id: int, key: L3Key) -> None:
        self._last[node_id] = key
        self._last.move_to_end(node_id)
        if len(self._last) > MEMO_NODES:
            self._last.popitem(last=False)
