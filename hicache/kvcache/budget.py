"""Page budgets per tier: what the control side may still hand out, in page counts.

    device free = device pages - pages the tree holds on L1 - running requests' own pages
                  - pages admitted loads will take when their batch is prepared
    host free   = host pages   - pages the tree holds on L2 - pages reserved for copies in
                  flight (backups on their way to L2, L3 prefetches)
    state pools on L2 (hybrid models: "swa" pages, "mamba" slots), each on its own:
                  pool size - held by the tree on L2 - reserved for backups in flight

Invariant: the runtime's allocations never exceed what this budget handed out, so a
runtime never runs out of pages (it raises CapacityError if it would).

When several schedulers share one runtime's pool, ``share`` (a
:class:`hicache.runtime.sharing.TenantShare`) bounds the device pages by the sharing
policy's live limit; ``device_total`` stays the most this scheduler can ever hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hicache.runtime.handles import Kind, Tier

_DEVICE, _HOST = Tier.DEVICE, Tier.HOST  # read per admission test (interface._DECODE)
# the residency's keys of the FULL pages it holds on L1 and L2 (Residency.held)
_L1_FULL, _L2_FULL = (_DEVICE, Kind.FULL), (_HOST, Kind.FULL)

if TYPE_CHECKING:
    from hicache.runtime.sharing import TenantShare
    from hicache.tree.radix import UnifiedRadixTree


class PageBudget:
    def __init__(self, tree: UnifiedRadixTree, device_pages: int, host_pages: int) -> None:
        self.tree = tree
        self.device_total = device_pages
        self.host_total = host_pages
        self.own = 0  # device pages running requests hold beyond what they borrow
        self.loads_pending = 0  # device pages admitted loads take at prepare
        self.host_reserved = 0  # host pages of backups and prefetches in flight
        self.share: TenantShare | None = None  # a pool shared with other schedulers
        self.host_pools: dict[Kind, int] = {}  # L2 state pools: pool -> pages (slots)
        self.host_pool_reserved: dict[Kind, int] = {}  # backups in flight, per state pool

    def device_used(self) -> int:
        return self.tree.held_pages(_DEVICE) + self.own + self.loads_pending

    def device_limit(self) -> int:
        if self.share is None:
            return self.device_total
        return min(self.device_total, self.share.limit())

    def device_free(self) -> int:
        """Negative when a shared pool asks this scheduler to give pages back. Without
        one: :meth:`device_limit` less :meth:`device_used`, in line (the tree's residency
        count read as ``held_pages`` reads it: a call chain less per admission check)."""
        if self.share is None:
            return self.device_total - (self.tree.residency.held.get(_L1_FULL, 0) + self.own
                                        + self.loads_pending)
        return self.device_limit() - self.device_used()

    def host_free(self) -> int:
        """L2 pages neither the tree holds (``held_pages(HOST)``, in line) nor a copy in
        flight reserved."""
        return self.host_total - self.tree.residency.held.get(_L2_FULL, 0) - self.host_reserved

    def free(self, tier: Tier) -> int:
        return self.device_free() if tier is _DEVICE else self.host_free()

    def total(self, tier: Tier) -> int:
        return self.device_total if tier is _DEVICE else self.host_total

    def host_pool_free(self, pool: Kind) -> int:
        """Free pages of an L2 state pool (SWA, MAMBA); 0 for a pool it lacks."""
        return (self.host_pools.get(pool, 0) - self.tree.held_pages(_HOST, pool)
                - self.host_pool_reserved.get(pool, 0))
