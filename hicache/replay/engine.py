"""Zero-time cache replay: the cache manager driven one request at a time, in arrival order.

For every request (no compute, no transfer time)::

    L3 prefetch decision (rest >= prefetch_threshold: query the page-hash chain, stop at
       the first miss, fetch the hit prefix into L2)  ──>  admit: match L1/L2, load the L2
       tail (all or nothing, >= load_back_threshold), make room  ──>  the new pages enter
       the tree  ──>  write policy: L1 -> L2 -> L3  ──>  release, session reference

The policies are the scheduler's own (:class:`~hicache.kvcache.manager.KVCacheManager`,
:class:`~hicache.kvcache.prefetch.L3Prefetcher`); :class:`ZeroTimeExecutor` stands in for
a runtime and carries each intent out at once (page allocators per tier, L3 as a set of
page-hash keys). Replay differs from a serving run in two knobs only (see the manager):
a request holds no pages for its output, and a fully cached prompt is a full hit (as
SGLang's RadixCache answers a match).

Hybrid models (``swa_window`` and/or ``mamba_slots``, L1 only) go through the same manager
with the scheduler's :class:`~hicache.kvcache.components.ComponentTracker` in zero time::

    match -> reuse up to the boundary every component accepts -> make room pool by pool
          -> the new FULL pages, the last window's SWA pages and a MAMBA checkpoint at the
             prompt's end enter the tree -> release

so reuse is bounded by the strictest component at each boundary (a MAMBA checkpoint
exists only where some request ended; SWA needs a live window).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hicache.config import CacheConfig
from hicache.kvcache.components import ComponentTracker
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.prefetch import L3Prefetcher
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef, RequestRuntimeHandle, Tier
from hicache.runtime.interface import (
    BackupIntent,
    PrefetchIntent,
    Release,
    RuntimeInfo,
    StoreIntent,
    TransferCompletion,
    TransferKind,
)
from hicache.runtime.page_ids import runs_minus
from hicache.runtime.state import host_state_pool_sizes
from hicache.tiers.hashing import L3Key, l3_page_keys
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

RUNTIME_ID = "replay"


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    rid: int
    arrival: float
    prompt_tokens: int
    device_hit: int
    host_hit: int
    l3_hit: int

    @property
    def cached_tokens(self) -> int:
        return self.device_hit + self.host_hit + self.l3_hit


class L3Set:
    """L3 contents as page-hash keys; ``capacity_pages`` None = unbounded, else LRU."""

    def __init__(self, capacity_pages: int | None = None) -> None:
        self.capacity = capacity_pages
        self._keys: OrderedDict[L3Key, None] = OrderedDict()

    def __contains__(self, key: L3Key) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def hit_prefix(self, keys: Iterable[L3Key], batch_pages: int = 128) -> int:
        """Consecutive hits from the start, stopping at the first miss (the batches of the
        query do not change the answer in zero time)."""
        hits = 0
        for k in keys:
            if k not in self._keys:
                return hits
            self._keys.move_to_end(k)
            hits += 1
        return hits

    def store(self, keys: Iterable[L3Key]) -> int:
        """Add ``keys``; return how many were new (pages written)."""
        written = 0
        for k in keys:
            if k in self._keys:
                continue
            written += 1
            self._keys[k] = None
            if self.capacity is not None and len(self._keys) > self.capacity:
                self._keys.popitem(last=False)
        return written


class ZeroTimeExecutor:
    """An :class:`~hicache.kvcache.plans.IntentSink` that carries intents out at once and
    answers with the completions a runtime would send (see the module docstring).
    ``device_pages`` / ``host_pages``: pages per L1 / L2 pool (FULL, and SWA / MAMBA for
    hybrid models)."""

    def __init__(self, device_pages: Mapping[Kind, int], host_pages: Mapping[Kind, int],
                 l3: L3Set | None) -> None:
        self.pools = {pool: PageAllocator(n, tier=Tier.DEVICE, pool=pool,
                                          runtime_id=RUNTIME_ID, order="fresh")
                      for pool, n in device_pages.items()}
        self.host_pools = {pool: PageAllocator(n, tier=Tier.HOST, pool=pool,
                                               runtime_id=RUNTIME_ID, order="fresh")
                           for pool, n in host_pages.items()}
        self.device, self.host = self.pools[Kind.FULL], self.host_pools[Kind.FULL]
        self.l3 = l3
        self.kv: KVCacheManager | None = None  # set by ReplayCache (it answers to the manager)
        self.prefetcher: L3Prefetcher | None = None
        self._job = 0
        self._rows: dict[int, list[CacheExtentRef]] = {}  # open row -> pages it allocated
        self.l3_written_pages = 0
        self.l3_read_pages = 0

    def _alloc(self, extent: CacheExtentRef) -> PageAllocator:
        return (self.pools if extent.tier is Tier.DEVICE else self.host_pools)[extent.pool]

    # -- placement for one request -------------------------------------------------
    def open_row(self, rid: int, own: Iterable[CacheExtentRef]) -> RequestRuntimeHandle:
        handle = RequestRuntimeHandle(RUNTIME_ID, rid, 0)
        self._rows[rid] = list(own)
        return handle

    # -- IntentSink ----------------------------------------------------------------
    def next_job_id(self) -> int:
        self._job += 1
        return self._job

    def free(self, extent: CacheExtentRef) -> None:
        self._alloc(extent).free(extent)

    def release(self, release: Release) -> None:
        """Free the row's pages the tree did not take (per pool)."""
        kept = release.kept()
        rows = self._rows.pop(release.request.slot_id, ())
        if len(kept) == len(rows) == 1 and kept[0] == rows[0]:
            return  # the common case: the tree took the row's one extent whole
        keep: dict[Kind, list[tuple[int, int]]] = {}
        for e in kept:
            keep.setdefault(e.pool, []).extend(e.runs())
        for own in rows:
            runs = own.runs()
            rest = runs_minus(runs, keep[own.pool]) if own.pool in keep else runs
            if rest:
                self.free(own.with_runs(rest))

    def backup(self, intent: BackupIntent) -> None:
        assert self.kv is not None
        host = self.host_pools[intent.src.pool].alloc(intent.src.num_pages)
        self.kv.backup_placed(intent.job_id, host)
        self.kv.on_transfer(TransferCompletion(intent.job_id, TransferKind.BACKUP, 0.0,
                                               host.num_pages, host))

    def store(self, intent: StoreIntent) -> None:
        assert self.kv is not None and self.l3 is not None
        written = self.l3.store(intent.keys)
        self.l3_written_pages += written
        self.kv.on_transfer(TransferCompletion(intent.job_id, TransferKind.STORE, 0.0, written))

    def prefetch(self, intent: PrefetchIntent) -> None:
        assert self.prefetcher is not None and self.l3 is not None
        hits = self.l3.hit_prefix(intent.keys, intent.batch_pages)
        n = min(hits, intent.max_pages) if hits >= max(1, intent.min_hit_pages) else 0
        ext = self.host.alloc(n) if n else None
        self.l3_read_pages += n
        self.prefetcher.done(TransferCompletion(intent.job_id, TransferKind.PREFETCH, 0.0, n,
                                                ext, hits))


class ReplayCache:
    """A tiered cache driven in zero time. ``l2`` and ``l3`` follow ``cfg``; with ``l3``
    given, L3 is reached through L2 (``cfg.enable_hierarchical_cache`` must be on).
    ``swa_window`` / ``mamba_slots``: a hybrid model's components (L1, or L1 and L2; no
    L3: hicache/kvcache/hybrid_tiers.py says why), in L1 pools of ``swa_tokens`` (default:
    L1's size) and ``mamba_slots``, L2 pools in L2's ratio to L1."""

    def __init__(self, cfg: CacheConfig, *, l3: L3Set | None = None,
                 host_tokens: int | None = None, swa_window: int = 0,
                 swa_tokens: int | None = None, mamba_slots: int = 0) -> None:
        self.cfg = cfg
        page = cfg.page_size
        l2 = cfg.enable_hierarchical_cache
        hybrid = bool(swa_window or mamba_slots)
        if hybrid and l3 is not None:
            raise ValueError("hybrid components (SWA, MAMBA) replay L1 and L2: no L3 path")
        host = host_tokens if host_tokens is not None else (cfg.host_tokens() if l2 else 0)
        host_pages = host // page if l2 else 0
        pools = {Kind.FULL: cfg.device_tokens // page}
        if swa_window:
            pools[Kind.SWA] = (swa_tokens if swa_tokens is not None else cfg.device_tokens
                               ) // page
        if mamba_slots:
            pools[Kind.MAMBA] = mamba_slots
        hosts = {Kind.FULL: host_pages, **host_state_pool_sizes(pools, host_pages)}
        self.exec = ZeroTimeExecutor(pools, hosts, l3)
        info = RuntimeInfo(RUNTIME_ID, 0, page, pools, hosts, swa_window=swa_window,
                           mamba=mamba_slots > 0)
        spec = (TreeSpec.hybrid(page, swa_window=swa_window, mamba=mamba_slots > 0)
                if hybrid else None)
        self.kv = KVCacheManager(cfg, info, self.exec, l3=l3 is not None, spec=spec,
                                 reserve_output=False, recompute_last_token=False)
        self.components = (ComponentTracker(self.kv, info, cfg.device_tokens, zero_time=True)
                           if hybrid else None)
        self.prefetcher = L3Prefetcher(self.kv) if self.kv.l3 else None
        self.exec.kv, self.exec.prefetcher = self.kv, self.prefetcher
        self.tree, self.device, self.host, self.l3 = (self.kv.tree, self.exec.device,
                                                      self.exec.host, l3)

    @property
    def pools(self) -> dict[Kind, PageAllocator]:
        """L1 page allocators per component."""
        return self.exec.pools

    @property
    def host_pools(self) -> dict[Kind, PageAllocator]:
        """L2 page allocators per component (empty pools where L2 is off)."""
        return self.exec.host_pools

    def process(self, req: Request) -> ReplayRecord:
        page = self.cfg.page_size
        st = RequestState(req, page_keys(req.tokens, page))
        if self.components is not None:
            return self._process_components(st)
        if self.kv.l3:
            st.hashes = l3_page_keys(req.tokens, st.pages, page, self.kv.key_scheme)
        if self.prefetcher is not None:
            self.prefetcher.start(st, self.tree.match(st.pages, touch=False), at_head=True)
        if not self.kv.admit(st):  # L1 cannot hold the prompt: reuse what L1 has, cache none
            self.kv.release_prefetch_locks(st)
            m = self.tree.match(st.pages, touch=False)
            self._reference_session(req, m.last_node)
            return ReplayRecord(req.rid, req.arrival, len(req.tokens), m.device_tokens, 0, 0)
        loaded = [self.device.alloc(n.num_pages) for n in st.load_nodes]
        self.kv.loaded(st, loaded)
        self.kv.loads_read(st)
        new = self.kv.footprint(st)
        own = self.device.alloc(new) if new else None
        st.handle = self.exec.open_row(req.rid, [own] if own is not None else [])
        parts = [*st.attach, *loaded, *([own] if own is not None else [])]
        st.kv = CacheExtentRef.concat(parts) if parts else None
        self.kv.cache_prompt(st)
        self.kv.finish(st)
        return ReplayRecord(req.rid, req.arrival, len(req.tokens), st.device_hit, st.host_hit,
                            st.l3_hit)

    def _process_components(self, st: RequestState) -> ReplayRecord:
        """A hybrid model's request, as the scheduler runs it with ``track_components``:
        the tracker admits it (with L2: loads FULL, the SWA window and the MAMBA checkpoint
        of the L2 part); the row holds its new FULL pages and, as its checkpoint, the SWA
        and MAMBA pages it reserved; the prompt enters the tree; the write policy copies
        every component."""
        tracker, req, pools = self.components, st.req, self.exec.pools
        assert tracker is not None
        m = tracker.match(st)
        if not tracker.admit(st, m):  # no room now: reuse what L1 has, cache none
            return ReplayRecord(req.rid, req.arrival, len(req.tokens), m.device_tokens, 0, 0)
        full_loads = [self.device.alloc(n.num_pages) for n in st.load_nodes]
        state_loads = [pools[e.pool].alloc(e.num_pages) for e in st.attach
                       if e.tier is Tier.HOST]  # SWA pages, the checkpoint, token order
        if full_loads or state_loads:
            assert tracker.tiers is not None
            tracker.tiers.loaded(st, full_loads + state_loads)
            self.kv.loads_read(st)
        new = self.kv.footprint(st)
        own = [self.device.alloc(new)] if new else []
        st.checkpoint = tuple(pools[k].alloc(n) for k, n in st.reserved.items() if n)
        st.handle = self.exec.open_row(req.rid, [*own, *st.checkpoint])
        attached = [e for e in st.attach if e.pool is Kind.FULL and e.tier is Tier.DEVICE]
        parts = attached + full_loads + own
        st.kv = CacheExtentRef.concat(parts) if parts else None
        node = tracker.cache_prompt(st)
        self.kv.relock(st, node)
        if tracker.tiers is not None:
            tracker.tiers.write_through(st, node)
        self.kv.finish(st, tracker.finish(st))
        return ReplayRecord(req.rid, req.arrival, len(req.tokens), st.device_hit, st.host_hit,
                            0)

    def _reference_session(self, req: Request, node: object) -> None:
        if req.session_id is not None:
            self.tree.reference_session(req.session_id, node)  # type: ignore[arg-type]
            if req.close_session:
                self.tree.close_session(req.session_id)


def in_arrival_order(requests: Iterable[Request]) -> list[Request]:
    """Requests sorted by arrival; equal arrivals keep their order in the input."""
    return sorted(requests, key=lambda r: r.arrival)


def replay(requests: Iterable[Request], cache: ReplayCache) -> list[ReplayRecord]:
    """Replay ``requests`` in arrival order (the input order breaks ties)."""
    return [cache.process(r) for r in in_arrival_order(requests)]
