"""One replica's invariants across the RuntimeInterface: the control side's tree and page
budget against the runtime's pools (tests, and the soak benchmark every N steps).

    check_replica(scheduler, runtime)   AssertionError naming the first broken rule

- the tree's own rules (:func:`hicache.tree.invariants.check_tree`);
- each runtime pool's free list (:meth:`sim.pools.PagePool.check`);
- the budget never hands out more than a tier holds (free pages >= 0);
- every page the tree holds on L1 or L2 is allocated in the runtime's pool of that tier
  (no use after free), and the runtime never holds more than the tier's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hicache.runtime.handles import Tier
from hicache.tree.invariants import check_tree

if TYPE_CHECKING:
    from hicache.scheduler.scheduler import Scheduler
    from sim.runtime import SimRuntime


def check_replica(scheduler: Scheduler, runtime: SimRuntime) -> None:
    tree, budget = scheduler.tree, scheduler.kv.budget
    check_tree(tree)
    for tier in (runtime.device, runtime.host):
        for pool in tier.pools.values():
            pool.check()
    if budget.device_free() < 0 or budget.host_free() < 0:
        raise AssertionError(f"page budget over-committed: L1 free {budget.device_free()}, "
                             f"L2 free {budget.host_free()}")
    for attr, tier in (("device", Tier.DEVICE), ("host", Tier.HOST)):
        pools = runtime.tier(tier)
        for node in tree.nodes.values():
            for ext in getattr(node, attr).values():
                if ext.runtime_id != runtime.runtime_id or ext.generation != runtime.generation:
                    continue  # a stale handle: the runtime refuses it, nothing to hold
                pool = pools[ext.pool]
                for page in ext.pages():
                    if not pool.is_allocated(page):
                        raise AssertionError(f"{node}: {attr} page {page} of pool "
                                             f"'{ext.pool}' is in the tree but free in the "
                                             f"runtime")
