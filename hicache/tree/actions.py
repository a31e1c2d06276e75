"""Frozen decision messages the tree emits; the cache/pool side executes them.

The tree owns no memory: when it drops data it says which extent of which component and
tier to free; when data must move it says which node's extent to back up or load.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache.runtime.handles import CacheExtentRef
from hicache.runtime.slot_init import slot_init
from hicache.tree.components import Kind


@slot_init
@dataclass(frozen=True, slots=True)
class FreeDevice:
    """Free these L1 pages (or MAMBA slot) of one component."""

    node_id: int
    kind: Kind
    extent: CacheExtentRef


@slot_init
@dataclass(frozen=True, slots=True)
class FreeHost:
    """Free these L2 pages of one component."""

    node_id: int
    kind: Kind
    extent: CacheExtentRef


@slot_init
@dataclass(frozen=True, slots=True)
class BackupNode:
    """Copy the node's device data (every component present) to L2; the node stays locked
    until :meth:`UnifiedRadixTree.complete_backup` is called."""

    node_id: int
    extents: tuple[tuple[Kind, CacheExtentRef], ...]
    tokens: int


@slot_init
@dataclass(frozen=True, slots=True)
class Demoted:
    """The node's device data was dropped; its L2 copy remains (it is now host-only)."""

    node_id: int
    tokens: int


@slot_init
@dataclass(frozen=True, slots=True)
class Deleted:
    """The node left the tree (all tiers)."""

    node_id: int
    tokens: int


Action = FreeDevice | FreeHost | BackupNode | Demoted | Deleted
