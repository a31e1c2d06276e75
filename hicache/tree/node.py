"""A tree node: a span of pages plus, per component, its data in each tier.

    node.key            [page0, page1, ...]   page keys (hicache.tree.pagekeys)
    node.device[kind]   CacheExtentRef on L1, absent = evicted there (a tombstone while
                        the node lives on)
    node.host[kind]     CacheExtentRef on L2 (backed up)
    node.locks[kind]    device lock count per component; node.locks[HOST] the host lock
"""

from __future__ import annotations

from collections.abc import Hashable

from hicache.runtime.handles import CacheExtentRef
from hicache.tree.components import Kind

PageKey = Hashable
HOST = "host"  # lock key of the L2 copy
_FULL = Kind.FULL  # read once: an Enum class's attribute read is slow (see residency.py)


class Node:
    __slots__ = (
        "id", "parent", "children", "key", "device", "host", "locks", "lock_handles",
        "backing_up", "last_access", "created", "hit_count", "priority", "sessions", "stamp",
    )

    def __init__(self, node_id: int, parent: Node | None, key: list, now: int) -> None:
        self.id = node_id
        self.parent = parent
        self.children: dict[PageKey, Node] = {}
        self.key: list = key
        self.device: dict[Kind, CacheExtentRef] = {}
        self.host: dict[Kind, CacheExtentRef] = {}
        self.locks: dict[Kind | str, int] = {}
        self.lock_handles: set[int] = set()
        self.backing_up = False
        self.last_access = now
        self.created = now
        self.hit_count = 0
        self.priority = 0
        self.sessions: dict[str, int] = {}  # session id -> refs from that session
        self.stamp = 0  # bumped whenever the node's eviction key may have changed

    @property
    def num_pages(self) -> int:
        return len(self.key)

    def locked(self, kind: Kind | str) -> bool:
        return self.locks.get(kind, 0) > 0

    def any_device_lock(self) -> bool:
        for k, v in self.locks.items():  # a loop, not any() over a generator: hot
            if v > 0 and k != HOST:
                return True
        return False

    @property
    def on_device(self) -> bool:
        return _FULL in self.device

    @property
    def on_host(self) -> bool:
        return _FULL in self.host

    @property
    def session_refs(self) -> int:
        return sum(self.sessions.values())

    def is_device_leaf(self) -> bool:
        """Holds FULL on L1 and no child does: the FULL eviction frontier."""
        if _FULL not in self.device:
            return False
        for c in self.children.values():
            if _FULL in c.device:
                return False
        return True

    def __repr__(self) -> str:
        dev = ",".join(k.value for k in self.device)
        host = ",".join(k.value for k in self.host)
        return f"Node({self.id}, pages={self.num_pages}, L1=[{dev}], L2=[{host}])"
