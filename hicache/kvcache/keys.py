"""L3 keys of tree nodes: the page-hash chain of the tokens from the root to each page.

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

from hicache.tiers.hashing import chain_keys, page_hashes
from hicache.tree.node import Node

MEMO_NODES = 1 << 16  # last keys kept (LRU); a miss only costs rehashing from an ancestor


class NodeKeys:
    def __init__(self, page_size: int) -> None:
        self.page = page_size
        self._last: OrderedDict[int, str] = OrderedDict()  # node id -> key of its last page

    def span(self, nodes: list[Node]) -> tuple[str, ...]:
        """The keys of the pages of consecutive ``nodes`` (a path segment, top first)."""
        todo = nodes[::-1]  # bottom-up: the span, then ancestors up to a known end
        prior: str | None = None
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
        out: list[str] = []
        for node in todo:
            if node.key and isinstance(node.key[0], bytes):  # packed tokens already
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

    def _remember(self, node_id: int, key: str) -> None:
        self._last[node_id] = key
        self._last.move_to_end(node_id)
        if len(self._last) > MEMO_NODES:
            self._last.popitem(last=False)
