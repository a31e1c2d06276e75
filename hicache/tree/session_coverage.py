"""What a session's references cover per component under SGLang's rule
(``cache.session_coverage: component``; https://github.com/sgl-project/sglang/pull/29173,
its Full / SWA / Mamba components), against ours (``path``: every node on the session's
path counts as referenced for every component).

    root ── a ── b ── c ── d      d = the session's frontier (its last finished request)
    FULL   path: a b c d          (both rules)
    SWA    the window + one page before d: c d (say)
    MAMBA  d only

Eviction of SWA windows and MAMBA states walks the unreferenced ones first; a node whose
component is not covered but whose full KV a session references is not taken down as a
whole leaf in that first pass (SGLang's atomic leaf guard).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hicache.tree.components import Kind

if TYPE_CHECKING:
    from hicache.tree.radix import UnifiedRadixTree

COVERAGES = ("path", "component")


def covered(tree: UnifiedRadixTree, kind: Kind) -> set[int]:
    """Ids of the nodes whose ``kind`` component some live session references."""
    if kind is Kind.MAMBA:
        return {f.id for f in tree.frontiers.values()}
    span = tree.window_pages + 1  # SGLang: sliding window + one page
    out: set[int] = set()
    for frontier in tree.frontiers.values():
        pages, node = 0, frontier
        while node is not None and node is not tree.root and pages < span:
            out.add(node.id)
            pages += node.num_pages
            node = node.parent
    return out
