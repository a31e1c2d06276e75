"""Test driver for the unified tree: it owns one PageAllocator per (tier, pool) and executes
every action the tree emits, the way the cache/pool side would.

    h = Harness(TreeSpec.hybrid(4, swa_window=8, mamba=True), device_pages=1000)
    pages = h.pages([1, 2, 3])            # three page keys (page ids -> token tuples)
    res = h.insert(pages)                 # allocates FULL/SWA/MAMBA, inserts, frees dups
    h.check_accounting()                  # allocator used == tree held + test-held pages

Invariant it checks: allocator used pages == pages the tree holds + pages the test holds
(in-flight backups); a double free raises inside PageAllocator.
"""

from __future__ import annotations

from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.tree.actions import Action, BackupNode, FreeDevice, FreeHost
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.invariants import check_tree
from hicache.tree.options import SGLANG, TreeOptions
from hicache.tree.radix import InsertResult, UnifiedRadixTree, page_keys

TIERS = (Tier.DEVICE, Tier.HOST)


class Harness:
    def __init__(self, spec: TreeSpec, *, device_pages: int = 10_000, host_pages: int = 10_000,
                 eviction_policy: str = "lru", session_aware: bool = False,
                 host_enabled: bool = False, write_back: bool = False,
                 options: TreeOptions = SGLANG) -> None:
        self.spec = spec
        self.tree = UnifiedRadixTree(spec, eviction_policy=eviction_policy,
                                     session_aware=session_aware, options=options)
        self.tree.residency.host_enabled = host_enabled
        self.tree.residency.write_back = write_back
        self.alloc: dict[tuple[Tier, Kind], PageAllocator] = {}
        for tier, cap in ((Tier.DEVICE, device_pages), (Tier.HOST, host_pages)):
            for kind in spec.kinds:
                self.alloc[(tier, kind)] = PageAllocator(cap, tier=tier, pool=kind)
        self.pending: dict[int, dict[Kind, CacheExtentRef]] = {}  # backup job -> host pages
        self.test_held: dict[tuple[Tier, Kind], int] = {}  # pages held by live requests

    # -- building inputs ---------------------------------------------------------------

    def state(self) -> tuple:
        """The tree as a twin run must leave it: clock, changes, shape, and every node's
        id, parent, key, last access and tiers' components."""
        t = self.tree
        nodes = sorted((n.id, n.parent.id if n.parent else None, tuple(n.key), n.last_access,
                        sorted(k.value for k in n.device), sorted(k.value for k in n.host))
                       for n in t.nodes.values())
        return t.clock, t.changes, t.shape, nodes
    def tokens(self, page_ids: list[int], extra: int = 0) -> list[int]:
        """Token ids whose page keys are one distinct tuple per page id (+ a partial page)."""
        p = self.spec.page_size
        out = [pid * 1000 + j for pid in page_ids for j in range(p)]
        return out + [999_999] * extra

    def pages(self, page_ids: list[int]) -> list[tuple[int, ...]]:
        return page_keys(self.tokens(page_ids), self.spec.page_size)

    def take(self, tier: Tier, kind: Kind, n: int) -> CacheExtentRef:
        return self.alloc[(tier, kind)].alloc(n)

    def fresh_values(self, n: int, *, swa_pages: int | None = None, mamba: bool = True,
                     ) -> dict[Kind, CacheExtentRef]:
        """Newly allocated device data for ``n`` pages: FULL for all, SWA for the last
        ``swa_pages`` (default all), one MAMBA slot."""
        values = {Kind.FULL: self.take(Tier.DEVICE, Kind.FULL, n)}
        if self.spec.get(Kind.SWA) is not None:
            k = n if swa_pages is None else swa_pages
            if k:
                values[Kind.SWA] = self.take(Tier.DEVICE, Kind.SWA, k)
        if mamba and self.spec.get(Kind.MAMBA) is not None:
            values[Kind.MAMBA] = self.take(Tier.DEVICE, Kind.MAMBA, 1)
        return values

    def insert(self, pages: list, values: dict[Kind, CacheExtentRef] | None = None,
               **kw) -> InsertResult:  # noqa: ANN003
        res = self.tree.insert(pages, values if values is not None else
                               self.fresh_values(len(pages), **kw))
        self.execute(res.actions)
        return res

    # -- executing actions ---------------------------------------------------------------
    def execute(self, actions) -> None:  # noqa: ANN001 - list or tuple of Action
        for a in actions:
            self.execute_one(a)

    def execute_one(self, a: Action) -> None:
        if isinstance(a, FreeDevice):
            self.alloc[(Tier.DEVICE, a.extent.pool)].free(a.extent)
        elif isinstance(a, FreeHost):
            self.alloc[(Tier.HOST, a.extent.pool)].free(a.extent)
        elif isinstance(a, BackupNode):
            self.pending[a.node_id] = {
                kind: self.take(Tier.HOST, kind, ext.num_pages) for kind, ext in a.extents}

    def begin_backup(self, node) -> int:  # noqa: ANN001
        a = self.tree.residency.begin_backup(node)
        self.execute_one(a)
        return a.node_id

    def complete_backup(self, job: int):  # noqa: ANN201
        return self.tree.residency.complete_backup(job, self.pending.pop(job))

    def change(self, op: str, pages: list, n: int) -> bool:
        """One tree-changing step of a random script: ``insert`` (the first ``n`` of
        ``pages``), ``backup`` (``pages``' L1 nodes to L2 at once), ``evict`` or
        ``evict_host`` (``n`` pages); False for any other ``op`` (the caller's own)."""
        if op == "insert":
            self.insert(pages[:n])
        elif op == "backup":
            self.backup_l1(pages)
        elif op == "evict":
            self.evict_device(n)
        elif op == "evict_host":
            self.evict_host(n)
        else:
            return False
        return True

    def backup_l1(self, pages: list) -> None:
        """Copy the L1 nodes on ``pages``' path that have no L2 copy yet, at once."""
        for node in self.tree.match(pages, touch=False).path:
            if node.on_device and not node.on_host and not node.backing_up:
                self.complete_backup(self.begin_backup(node))

    def evict_device(self, pages: int, kind: Kind = Kind.FULL):  # noqa: ANN201
        res = self.tree.evict_device(pages, kind)
        self.execute(res.actions)
        return res

    def evict_host(self, pages: int):  # noqa: ANN201
        res = self.tree.evict_host(pages)
        self.execute(res.actions)
        return res

    # -- checks ----------------------------------------------------------------------------
    def used(self, tier: Tier, kind: Kind = Kind.FULL) -> int:
        return self.alloc[(tier, kind)].used_pages

    def pending_pages(self, tier: Tier, pool: Kind) -> int:
        if tier is not Tier.HOST:
            return 0
        return sum(e.num_pages for job in self.pending.values() for k, e in job.items()
                   if e.pool == pool)

    def check_accounting(self) -> None:
        """Every allocated page is held by the tree or by the test, exactly once; and the
        tree's own invariants hold (hicache.tree.invariants)."""
        check_tree(self.tree)
        for (tier, pool), a in self.alloc.items():
            held = self.tree.held_pages(tier, pool)
            attr = "device" if tier is Tier.DEVICE else "host"
            direct = sum(ext.num_pages for n in self.tree.nodes.values()
                         for ext in getattr(n, attr).values() if ext.pool == pool)
            assert held == direct, (tier, pool, held, direct)
            extra = self.pending_pages(tier, pool) + self.test_held.get((tier, pool), 0)
            assert a.used_pages == held + extra, (tier, pool, a.used_pages, held, extra)
