"""The safe reuse boundary: how far compute may skip on a matched path.

Walk the matched path; at each node end every component checks its own data and compute
resumes from the deepest boundary all accept:

    FULL   data on every node from the root to the boundary
    SWA    a contiguous run of nodes with live SWA data covering ``window`` tokens that
           ends at the boundary (or the whole path when it is shorter than the window)
    MAMBA  a checkpoint on the node that ends exactly at the boundary

Seed 003's example: 4-token nodes, window 4, path [mamba] [-] [swa tombstone, mamba] [-]
gives 4 with all three components, 16 without MAMBA, 16 with FULL only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hicache.tree.components import Kind, TreeSpec
from hicache.tree.node import Node

_FULL, _SWA, _MAMBA = Kind.FULL, Kind.SWA, Kind.MAMBA  # hot: Enum reads (ARCHITECTURE.md)
Has = Callable[[Node, Kind], bool]


def on_device(node: Node, kind: Kind) -> bool:
    return kind in node.device


def on_device_or_host(node: Node, kind: Kind) -> bool:
    return kind in node.device or kind in node.host


def safe_boundary(path: Sequence[Node], spec: TreeSpec, has: Has = on_device) -> tuple[int, int]:
    """Return (tokens, number of path nodes) of the deepest boundary every component accepts."""
    page = spec.page_size
    swa = spec.get(_SWA)
    mamba = spec.get(_MAMBA) is not None
    if swa is None and not mamba:  # FULL alone: each node holding it ends a boundary
        full, pages, nodes = _FULL, 0, 0
        for node in path:
            if not (full in node.device if has is on_device else has(node, full)):
                break
            pages += len(node.key)  # num_pages
            nodes += 1
        return pages * page, nodes
    best_tokens = best_nodes = 0
    pos = 0
    swa_run = 0
    for i, node in enumerate(path):
        if not has(node, _FULL):
            break
        tokens = node.num_pages * page
        pos += tokens
        ok = True
        if swa is not None:
            swa_run = swa_run + tokens if has(node, _SWA) else 0
            ok = swa_run >= min(swa.window, pos)
        if ok and mamba:
            ok = has(node, _MAMBA)
        if ok:
            best_tokens, best_nodes = pos, i + 1
    return best_tokens, best_nodes
