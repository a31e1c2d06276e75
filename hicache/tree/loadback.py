"""What a hybrid match loads back from L2, per component, to reuse up to the L1+L2 boundary.

The L1+L2 boundary of :meth:`UnifiedRadixTree.match` holds where every tracked component
is available on *some* tier (boundary.py with ``on_device_or_host``). To compute from
there, each component brings back only what the boundary reads::

    path     [n1 n2 n3 n4]              FULL on L1: n1 n2       FULL on L2 only: n3 n4
    FULL     n3 n4                      every path node without FULL on L1 (a suffix:
                                        FULL on L1 is closed under parents)
    SWA      the nodes of the last window (min(window, boundary) tokens, whole pages)
             without SWA on L1; a node that reaches above the window and must be loaded is
             split at the window's start first, so a load brings back exactly the window
             (SGLang loads the rounded window only, not a long host tombstone)
    MAMBA    the boundary node's checkpoint, when it is on L2 only

The loads, one plan with FULL (attach/loads of the request's first slice), restore every
component at the boundary; the tree stays the owner of what lands (the caller puts the
device extents on the same nodes). Nothing here locks or allocates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hicache.tree.components import Kind
from hicache.tree.node import Node
from hicache.tree.radix import MatchResult, UnifiedRadixTree


@dataclass(frozen=True, slots=True)
class ComponentLoads:
    """The loads of one hybrid reuse, ``path`` the matched nodes up to the boundary (after
    any window split), ``tokens`` the reused length."""

    path: tuple[Node, ...]
    tokens: int
    full: tuple[Node, ...]  # nodes whose FULL pages are loaded (path order)
    swa: tuple[Node, ...]  # nodes whose SWA pages are loaded (path order)
    mamba: Node | None  # the boundary node, when its checkpoint is loaded

    def pages(self, kind: Kind) -> int:
        """Device pages (MAMBA: slots) the loads of ``kind`` take."""
        if kind is Kind.MAMBA:
            return int(self.mamba is not None)
        nodes = self.full if kind is Kind.FULL else self.swa
        return sum(n.host[kind].num_pages for n in nodes)

    @property
    def sources(self) -> tuple[Node, ...]:
        """Every node whose L2 copy a load reads (pin them against L2 eviction)."""
        seen = dict.fromkeys((*self.full, *self.swa, *((self.mamba,) if self.mamba else ())))
        return tuple(seen)

    @property
    def empty(self) -> bool:
        return not (self.full or self.swa or self.mamba is not None)


def window_pages(tree: UnifiedRadixTree) -> int:
    swa = tree.spec.get(Kind.SWA)
    return math.ceil(swa.window / tree.spec.page_size) if swa is not None else 0


def plan_loads(tree: UnifiedRadixTree, m: MatchResult) -> ComponentLoads:
    """The loads that make every component available on L1 at ``m``'s L1+L2 boundary."""
    path = list(m.path)
    page = tree.spec.page_size
    swa: list[Node] = []
    if tree.spec.get(Kind.SWA) is not None and path:
        need = min(window_pages(tree), sum(n.num_pages for n in path))
        i = len(path)
        while need > 0:
            i -= 1
            node = path[i]
            if Kind.SWA not in node.device:
                if node.num_pages > need:  # reaches above the window: load the window only
                    path.insert(i, tree.split(node, node.num_pages - need))
                swa.append(node)
            need -= node.num_pages
        swa.reverse()
    full = tuple(n for n in path if Kind.FULL not in n.device)  # after any split
    mamba = None
    if tree.spec.get(Kind.MAMBA) is not None and path and Kind.MAMBA not in path[-1].device:
        mamba = path[-1]
    tokens = sum(n.num_pages for n in path) * page
    return ComponentLoads(tuple(path), tokens, full, tuple(swa), mamba)
