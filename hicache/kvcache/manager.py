"""KVCacheManager: one replica's cache side, called by the scheduler and by replay.

    admit(st)        match L1/L2 -> reuse (L1 prefix + the L2 tail to load, all or nothing,
                     >= load_back_threshold) -> make room for the request's footprint and
                     the loads -> lock what it reuses -> account its pages
    loaded(st, ext)  the loads landed on L1
    cache_prompt(st) the prompt's pages enter the tree; the write policy backs nodes up
    finish(st)       the output's pages enter the tree; release; sessions
    on_transfer(c)   backup done -> L2 copy in the tree -> store to L3 (any write policy)
                     store done -> unpin the L2 copy; prefetch done -> prefetcher

Every intent (free, release, backup, store, prefetch) goes to an :class:`IntentSink`: the
scheduler's PlanBuilder puts it in the next plan, replay's executor carries it out at
once. The manager emits an intent only once its own bookkeeping is done, so a sink may
call back (``backup_placed`` / ``on_transfer``) before ``emit`` returns.

Two knobs separate a serving run from a hit-rate replay (SGLang's RadixCache, one request
at a time): ``reserve_output`` (a running request holds pages for its output too) and
``recompute_last_token`` (a fully cached prompt still computes its last page, as SGLang's
scheduler matches at most ``len - 1`` tokens).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from hicache.config import CacheConfig
from hicache.kvcache.budget import PageBudget
from hicache.kvcache.decisions import Admit, Backup, Decision, Evict, Finish, Load
from hicache.kvcache.keys import NodeKeys
from hicache.kvcache.plans import IntentSink
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.interface import (
    BackupIntent,
    Release,
    RuntimeInfo,
    StoreIntent,
    TransferCompletion,
    TransferKind,
)
from hicache.runtime.slot_init import slot_builder, slot_init
from hicache.tiers.hashing import ChainIds, L3Key, l3_page_keys
from hicache.tiers.write_policy import WritePolicy
from hicache.tree.actions import Action, BackupNode, Deleted, Demoted, FreeDevice, FreeHost
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.locks import LockHandle
from hicache.tree.node import HOST, Node
from hicache.tree.radix import MatchResult, UnifiedRadixTree, page_keys
from hicache.workload.request import token_prefix

# eviction rounds per make-room: under write_back the first round starts backups, and a
# runtime that copies at once (replay) lets a later round demote what they copied
_FULL, _DEVICE, _HOST = Kind.FULL, Tier.DEVICE, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)
_BACKUP, _STORE = TransferKind.BACKUP, TransferKind.STORE
MAKE_ROOM_ROUNDS = 4
_ORDER = {Kind.FULL: 0, Kind.SWA: 1, Kind.MAMBA: 2}  # a backup's copies, FULL first


@slot_init
@dataclass(frozen=True, slots=True)
class Reuse:
    """What a request reuses: ``device_tokens`` of L1 prefix, then ``load_nodes`` (L2-only
    nodes, ``host_tokens``) loaded back."""

    match: MatchResult
    device_tokens: int
    load_nodes: tuple[Node, ...]
    host_tokens: int


# built per eviction, admission, request and backup: at slot speed (slot_builder;
# ARCHITECTURE.md)
_evict, _reuse = slot_builder(Evict), slot_builder(Reuse)
_admit, _load, _finish = slot_builder(Admit), slot_builder(Load), slot_builder(Finish)
_backup, _backup_intent = slot_builder(Backup), slot_builder(BackupIntent)
_release, _store_intent = slot_builder(Release), slot_builder(StoreIntent)


@dataclass(slots=True)
class _BackupJob:
    """One node's backup: a copy (job id) per component, complete when all have landed."""

    node_id: int
    keys: tuple[L3Key, ...] | None  # L3 keys when known at start (write-through)
    parts: dict[int, tuple[Kind, int]] = field(default_factory=dict)  # job -> kind, pages
    hosts: dict[Kind, CacheExtentRef] = field(default_factory=dict)  # landed copies
    evicting: bool = False  # an eviction under write_back: the node leaves L1 once copied

    @property
    def full_pages(self) -> int:
        return sum(n for kind, n in self.parts.values() if kind is _FULL)


class KVCacheManager:
    def __init__(self, cache: CacheConfig, info: RuntimeInfo, sink: IntentSink, *,
                 l3: bool = False, spec: TreeSpec | None = None,
                 reserve_output: bool = True, recompute_last_token: bool = True) -> None:
        self.cache, self.sink, self.page = cache, sink, info.page_size
        if self.page != cache.page_size:
            raise ValueError(f"page_size {cache.page_size} but the runtime uses {self.page}")
        self.tree = UnifiedRadixTree(spec or TreeSpec(self.page),
                                     eviction_policy=cache.radix_eviction_policy,
                                     session_aware=cache.enable_session_aware_eviction,
                                     options=cache.tree_options,
                                     session_coverage=cache.session_coverage)
        self.l2 = cache.enable_hierarchical_cache and info.host_pages.get(_FULL, 0) > 0
        self.l3 = l3 and self.l2  # L3 is reached through L2 (stores read it, fetches land there)
        self.write = WritePolicy.named(cache.hicache_write_policy)
        self.hits_once = cache.hit_count == "once_per_request"
        # buffer_only: an L1 eviction deletes (the KV is in L3), it never demotes to L2
        self.tree.residency.host_enabled = self.l2 and not cache.hicache_buffer_only
        self.tree.residency.write_back = self.l2 and self.write.backup_on_eviction
        self.budget = PageBudget(self.tree, info.device_pages[_FULL],
                                 info.host_pages.get(_FULL, 0) if self.l2 else 0)
        self.reserve_output = reserve_output
        self.recompute_last_token = recompute_last_token
        self.decisions: list[Decision] = []
        self._backups: dict[int, _BackupJob] = {}
        self._part_of: dict[int, int] = {}  # a component copy's job id -> its backup's
        self._backup_hosts: dict[int, CacheExtentRef] = {}
        self._stores: dict[int, tuple[list[Node], LockHandle]] = {}  # job -> (nodes, pin)
        self._backups_refused = 0  # backups that found no L2 room
        self.key_scheme = cache.l3_key_scheme
        self._keys = NodeKeys(self.page, self.key_scheme)
        # the run's chain ids (chain64 keys as dense ids; None: chain64's hashes), shared by
        # the replicas of one simulated run: :meth:`use_chain_ids`
        self.chain_ids: ChainIds | None = None
        self._refused: tuple | None = None  # what admit read when it last refused (admit)
        self._orphans: dict[int, list[CacheExtentRef]] = {}  # rid -> loads it owns (land)

    def use_chain_ids(self, ids: ChainIds) -> None:
        """Key chain64 pages by ``ids`` (:class:`hicache.tiers.hashing.ChainIds`, one per
        run, shared by every replica reaching the same L3): equal iff chain64's keys are,
        and dense. Set before the first request."""
        self.chain_ids = self._keys.ids = ids

    def log(self, decision: Decision) -> None:
        self.decisions.append(decision)

    @property
    def busy(self) -> bool:
        """Copies in flight that will call back (backups, stores)."""
        return bool(self._backups or self._stores)

    # -- accounting ------------------------------------------------------------------
    def footprint(self, st: RequestState) -> int:
        """Device pages ``st`` owns at its largest beyond what it borrows from or handed
        to the tree: prompt + output (``reserve_output``), else the prompt's full pages."""
        if self.reserve_output:
            total = math.ceil((st.prompt_len + st.output_len) / self.page)
        else:
            total = len(st.pages)
        return total - st.prefix_tokens // self.page - st.donated_pages

    def never_fits(self, st: RequestState) -> str | None:
        """Why ``st`` can never be admitted (it needs more L1 pages than exist), or None.
        A reason reads ``code: detail``; the code groups reasons in summaries."""
        need = math.ceil((st.prompt_len + (st.output_len if self.reserve_output else 0))
                         / self.page)
        if need > self.budget.device_total:
            return (f"exceeds_l1: needs {need} L1 pages ({st.prompt_len} prompt + "
                    f"{st.output_len} output tokens), L1 holds {self.budget.device_total}")
        return None

    def make_room(self, tier: Tier, pages: int) -> bool:
        """Evict until ``pages`` pages of ``tier`` are free; False if that is impossible now.

        Under write_back, an L1 leaf is backed up before it leaves; when L2 has no room for
        that copy, the leaf is deleted instead (SGLang's ``drop_subtree_no_host``), so L1
        eviction keeps making progress under L2 pressure."""
        refused = self._backups_refused
        for _ in range(MAKE_ROOM_ROUNDS):
            free = self.budget.free(tier)
            if free >= pages:
                return True
            if tier is _DEVICE:  # pages whose eviction backup is under way: coming
                coming = (sum(b.full_pages for b in self._backups.values() if b.evicting)
                          if self._backups else 0)
                if free + coming >= pages:  # free once copied; start no more backups
                    break
                res = self.tree.evict_device(pages - free - coming)
            else:
                res = self.tree.evict_host(pages - free)
            if not res.actions:
                break
            self.apply(res.actions)
        free = self.budget.free(tier)
        if free < pages and tier is _DEVICE and self._backups_refused > refused:
            residency, write_back = self.tree.residency, self.tree.residency.write_back
            residency.write_back = False  # this round deletes what it cannot back up
            try:
                self.apply(self.tree.evict_device(pages - free).actions)
            finally:
                residency.write_back = write_back
        free = self.budget.free(tier)
        if tier is _DEVICE and pages > 0 and self.budget.share is not None:
            self.budget.share.short(pages - free)  # a shared pool reclaims for us if short
        return free >= pages

    def shrink(self) -> None:
        """Evict what a shared pool's limit no longer covers (nothing if within it:
        :meth:`PageBudget.device_free`, without a shared pool a sum in line)."""
        if self.budget.device_free() >= 0:
            return
        self.make_room(_DEVICE, 0)

    def apply(self, actions: Iterable[Action]) -> None:
        """Carry out the tree's actions: frees go to the sink, backups start (evictions
        logged as :meth:`log` logs them: appended, in line)."""
        log = self.decisions.append
        for a in actions:
            if isinstance(a, (FreeDevice, FreeHost)):
                self.sink.free(a.extent)
            elif isinstance(a, Demoted):
                log(_evict(a.node_id, a.tokens, "demote"))
            elif isinstance(a, Deleted):
                log(_evict(a.node_id, a.tokens, "delete"))
            elif isinstance(a, BackupNode):  # an eviction under write_back
                self.start_backup(a, evicting=True)

    def describe_l1(self) -> str:
        """How much of L1 the tree holds and how much of that nothing can evict now."""
        pinned = sum(n.device[_FULL].num_pages for n in self.tree.nodes.values()
                     if n.on_device and (n.any_device_lock() or n.backing_up
                                         or n.locked(HOST)))
        return (f"the tree holds {self.tree.held_pages(Tier.DEVICE)} L1 pages, {pinned} of "
                f"them locked (in use, being copied, or their L2 copy pinned)")

    # -- admission -------------------------------------------------------------------
    def reuse(self, st: RequestState) -> Reuse:
        """Match ``st`` (touching the path): the L1 prefix and the L2 tail worth loading."""
        m = self.tree.match(st.pages, memo=True)
        tail = list(m.host_tail) if self.l2 else []
        host = m.host_tokens if tail else 0
        if host < self.cache.load_back_threshold:
            tail, host = [], 0
        reuse = m.device_tokens + host
        if self.recompute_last_token and reuse >= st.prompt_len:  # compute >= 1 page
            reuse = (st.prompt_len - 1) // self.page * self.page
            if reuse < m.device_tokens:
                tail, host = [], 0
            else:
                host = reuse - m.device_tokens
                keep, acc = [], 0
                for n in tail:
                    if acc >= host:
                        break
                    keep.append(n)
                    acc += n.num_pages * self.page
                tail = keep if acc == host else []
                host = acc if tail else 0
                reuse = m.device_tokens + host
        return _reuse(m, min(m.device_tokens, reuse), tuple(tail), host)

    def admit(self, st: RequestState) -> bool:
        """Reserve what ``st`` reuses and its footprint; False (nothing changed but the
        match's recency) when L1 cannot make room now.

        A refusal that evicted nothing is remembered with what it read (the tree's change
        count, the budget); asked again before any of it changed (a blocked queue head,
        step after step), admit refuses at once: the full attempt would refuse again, and
        its only effect, re-stamping the same path as the most recent, keeps every
        recency order as it is. Once stamps moved, a refusal whose match leaves L1 short
        with nothing evictable but the head's own prefix is still made without the lock,
        the eviction walk and the unlock (:meth:`_refusal_certain`)."""
        if self.refusal_stands(st):
            return False
        self._refused = None
        r = self.reuse(st)
        tail = list(r.load_nodes)
        st.prefix_tokens = r.device_tokens + r.host_tokens
        load_pages = r.host_tokens // self.page
        need = self.footprint(st) + load_pages
        if self._refusal_certain(need, r.match.device_node):
            st.prefix_tokens = 0
            self._refused = self._admission_reads(st)
            return False
        lock = self.tree.lock(r.match.device_node if not tail else tail[-1])
        changes, refused = self.tree.changes, self._backups_refused
        if not self.make_room(_DEVICE, need):
            quiet = self.tree.changes == changes and self._backups_refused == refused
            self.tree.unlock(lock)
            st.prefix_tokens = 0
            if quiet and self.budget.share is None and not self.tree.residency.lru:
                self._refused = self._admission_reads(st)  # FULL only, a pool of its own
            return False
        st.lock = lock
        st.host_lock = self.tree.locks.lock_host(tail) if tail else None
        st.load_nodes = tail
        self.budget.loads_pending += load_pages
        st.attach = self.device_extents(r.match.path[:r.match.device_nodes], r.device_tokens)
        from_l3 = min(r.host_tokens, st.prefetch_pages * self.page)
        st.device_hit, st.host_hit, st.l3_hit = (r.device_tokens, r.host_tokens - from_l3,
                                                 from_l3)
        self.budget.own += self.footprint(st)
        self.log(_admit(st.rid, st.device_hit, st.host_hit, st.l3_hit))
        if tail:
            self.log(_load(st.rid, r.host_tokens))
        self.release_prefetch_locks(st)
        return True

    def _refusal_certain(self, need: int, end: Node | None) -> bool:
        """:meth:`admit` (its match just made) would lock the reused path, find L1 short of
        ``need`` pages and nothing to evict, change nothing in :meth:`make_room`, unlock
        and refuse, remembering the refusal: here without the lock, the walk or the
        unlock, whose only lasting effects (the L1 heap's live entries) this leaves too
        (:meth:`Residency.device_refusal`). FULL only, a pool of its own, no write_back
        (make_room's waits for eviction backups and its delete round need it)."""
        res = self.tree.residency
        if self.budget.share is not None or res.lru or res.write_back:
            return False
        if self.budget.device_free() >= need:
            return False
        return res.device_refusal(end)

    def refusal_stands(self, st: RequestState) -> bool:
        """:meth:`admit` of ``st`` would refuse at once, changing nothing (see there)."""
        return self._refused is not None and self._refused == self._admission_reads(st)

    def _admission_reads(self, st: RequestState) -> tuple:
        """What :meth:`admit` of ``st`` reads that can change while it waits."""
        b = self.budget
        return (st.rid, st.prefetch_pages, st.donated_pages, self.tree.changes, b.own,
                b.loads_pending,
                b.host_reserved, b.device_total, b.host_total, self._backups_refused)

    def release_prefetch_locks(self, st: RequestState) -> None:
        """Admitted: the request's own locks now hold what its prefetch protected."""
        for lock in (st.prefix_lock, st.prefetch_lock):
            if lock is not None:
                self.tree.unlock(lock)
        st.prefix_lock = st.prefetch_lock = None

    def device_extents(self, nodes: Iterable[Node], tokens: int) -> tuple[CacheExtentRef, ...]:
        """The FULL L1 extents of the first ``tokens`` tokens along ``nodes``."""
        out, left = [], tokens // self.page
        for n in nodes:
            if left <= 0:
                break
            ext = n.device[_FULL]
            out.append(ext if ext.num_pages <= left else ext.slice(0, left))
            left -= ext.num_pages
        return tuple(out)

    def loaded(self, st: RequestState, extents: Iterable[CacheExtentRef]) -> None:
        """The runtime placed ``st``'s loads on L1 (``extents``, one per load node)."""
        for node, ext in zip(st.load_nodes, extents, strict=True):
            self.budget.loads_pending -= ext.num_pages
            self.land(st, node, _FULL, ext)

    def land(self, st: RequestState, node: Node, kind: Kind, ext: CacheExtentRef) -> bool:
        """A load of ``st`` placed ``node``'s ``kind`` on L1 at ``ext``: it joins the node.
        Two requests can load the same L2 node (both admitted before either load lands),
        or one computes and inserts it meanwhile; a node that holds ``kind`` on L1
        already keeps its copy, and this one is ``st``'s own until it finishes
        (:meth:`free_orphans`): returns False. Replacing the node's copy instead would
        leak those pages and the tree's page count (an L1 that looks full forever)."""
        if kind in node.device:
            self._orphans.setdefault(st.rid, []).append(ext)
            if kind is _FULL:
                self.budget.own += ext.num_pages
            return False
        self.tree.residency.put_value(node, _DEVICE, kind, ext)
        self.tree.residency.touched(node)
        return True

    def free_orphans(self, st: RequestState) -> None:
        """Free the copies :meth:`land` left to ``st`` (it finished)."""
        for ext in self._orphans.pop(st.rid, ()):
            if ext.pool is _FULL:
                self.budget.own -= ext.num_pages
            self.sink.free(ext)

    def loads_read(self, st: RequestState) -> None:
        """The loads' source L2 pages were read: unpin them (buffer_only: drop them)."""
        if st.host_lock is None:
            return
        self.tree.unlock(st.host_lock)
        st.host_lock = None
        if self.cache.hicache_buffer_only:
            self.drop_staging(st.load_nodes)

    # -- caching ---------------------------------------------------------------------
    def cache_kv(self, st: RequestState, pages: list) -> Node | None:
        """Insert ``pages`` (a prefix of the request's KV, ``st.kv``) into the tree; the
        request's own pages the tree takes become tree-owned (kept at release)."""
        n = len(pages)
        first = st.prefix_tokens // self.page
        inserted = self.inserted(st, n)
        if 0 < n <= first:  # all reused: the walk still counts the hits (as SGLang's does)
            self.tree.insert(pages, {}, inserted=inserted)
        if n <= first or st.kv is None or st.kv.num_pages < n:
            return None
        ext = st.kv.slice(first, n)
        res = self.tree.insert(pages, {_FULL: ext}, inserted=inserted)
        if res.actions or st.donated:  # skip duplicates, and pages handed over before
            gone: set[int] = set()
            for extent in [a.extent for a in res.actions] + st.donated:
                gone.update(extent.pages())
            own = [p for p in ext.pages() if p not in gone]
            taken, count = (ext.with_pages(own), len(own)) if own else (None, 0)
        else:  # the common case: the tree took every new page
            taken, count = ext, ext.num_pages
        if taken is not None:
            st.donated.append(taken)
            st.donated_pages += count
            self.budget.own -= count
        return res.node

    def inserted(self, st: RequestState, n: int) -> int:
        """Pages of its prefix an insert of ``n`` pages by ``st`` counts no hit on (those
        it inserted before, with ``cache.hit_count: once_per_request``); notes the insert."""
        before, st.inserted_pages = st.inserted_pages, max(st.inserted_pages, n)
        return before if self.hits_once else 0

    def relock(self, st: RequestState, node: Node | None) -> None:
        """``st`` now holds its path down to ``node`` (the pages it just cached)."""
        if node is None:
            return
        st.lock = self.tree.lock(node) if st.lock is None else self.tree.locks.move(st.lock,
                                                                                     node)

    def cache_prompt(self, st: RequestState) -> None:
        """The prompt is computed: its full pages enter the tree, the request keeps them."""
        node = self.cache_kv(st, st.pages)
        self.relock(st, node)
        self.write_through(st, st.pages, end=node)

    def write_through(self, st: RequestState, pages: list,
                      nodes: Iterable[Node] | None = None, min_hits: int = 0,
                      end: Node | None = None) -> None:
        """The write policy: back up the path's nodes that reached its threshold and hold
        data on L1 with no L2 copy (``nodes``: that path, else the L1 match of ``pages``;
        ``end``: the node the insert of ``pages`` just ended at, whose root path is that
        match, read without a second walk; ``min_hits``: the hits a node of it counts at
        least). A node whose FULL copy is on L2 already gets a component-only backup of
        the hybrid components it lacks there (SGLang's incremental backup)."""
        if not self.l2 or self.write.threshold is None:
            return
        from_root = nodes is None  # then the path from the root: pages before a node add up
        if nodes is None and end is not None:
            nodes = self.tree.device_path(end)
        elif nodes is None:
            m = self.tree.match(pages, touch=False)
            nodes = m.path[:m.device_nodes]
        at = 0  # pages before ``node`` (from_root); backups change no node's span
        full = _FULL  # a local: an Enum class's attribute read is slow
        for node in nodes:
            first = at
            at += len(node.key)
            # a component on L1 with no L2 copy: the device kinds are not all host kinds
            if (full in node.device and not node.backing_up
                    and not node.device.keys() <= node.host.keys()
                    and self.write.backup_on_hit(max(node.hit_count, min_hits))):
                if node.on_host:
                    missing = frozenset(k for k in node.device if k not in node.host)
                    self.start_backup(self.tree.residency.begin_backup(node), None, missing)
                    continue
                if from_root:
                    count = node.num_pages
                else:
                    first, count = self.tree.page_span(node)
                keys = tuple(st.hashes[first:first + count])
                self.start_backup(self.tree.residency.begin_backup(node),
                                  keys if self.l3 and len(keys) == count else None)

    def finish(self, st: RequestState,
               component_keep: tuple[CacheExtentRef, ...] | None = None) -> None:
        """``st`` produced its last token: cache its output's KV (when the workload knows
        it), release its row keeping what the tree took, unlock, reference its session.
        ``component_keep``: the extents to keep, decided by a component tracker (hybrid
        models keep no output checkpoint)."""
        tail = None
        if (st.req.full_tokens is not None and st.output_len > 1
                and component_keep is None):
            kv = token_prefix(st.req.full_tokens, st.prompt_len + st.output_len - 1)
            pages = page_keys(kv, self.page)
            if len(pages) > len(st.pages) and (tail := self.cache_kv(st, pages)) is not None:
                if self.l3:
                    st.hashes = l3_page_keys(kv, pages, self.page, self.key_scheme,
                                             self.chain_ids)
                self.write_through(st, pages, end=tail)
        self.budget.own -= self.footprint(st)
        if component_keep is not None:
            keep = component_keep or None
        else:
            keep = CacheExtentRef.concat(st.donated) if st.donated else None
        self.free_orphans(st)
        if st.handle is not None:
            self.sink.release(_release(st.handle, keep))
        node = tail or (st.lock.entries[0][0] if st.lock and st.lock.entries else None)
        if st.lock is not None:
            self.tree.unlock(st.lock)
            st.lock = None
        if st.req.session_id is not None:
            self.tree.reference_session(st.req.session_id, node)
            if st.req.close_session:
                self.tree.close_session(st.req.session_id)
        self.log(_finish(st.rid))

    # -- copies between tiers --------------------------------------------------------
    def start_backup(self, a: BackupNode, keys: tuple[L3Key, ...] | None = None,
                     kinds: frozenset[Kind] | None = None, *, evicting: bool = False) -> None:
        """Copy a node to L2 (write policy, or an eviction under write_back): FULL, and each
        other component on L1 (hybrid models) that finds room in its own L2 pool, one
        BackupIntent (job) per component. ``kinds``: only these (a node whose FULL copy
        is on L2 already). Without L2 room for FULL, when it is copied, nothing is."""
        if kinds is None and len(a.extents) == 1:  # one component: nothing to pick or order
            parts = list(a.extents)
        else:
            parts = sorted(((k, e) for k, e in a.extents if kinds is None or k in kinds),
                           key=lambda part: _ORDER[part[0]])
        if parts[0][0] is _FULL and not self.make_room(_HOST, parts[0][1].num_pages):
            parts = []
        if parts and parts[-1][0] is not _FULL:  # a state component (FULL sorts first)
            parts = [(k, e) for k, e in parts
                     if k is _FULL or self._state_host_room(k, e.num_pages)]
        if not parts:
            self.tree.residency.abort_backup(a.node_id)
            self._backups_refused += 1
            return
        if len(parts) != len(a.extents):
            self.tree.residency.narrow_backup(a.node_id, frozenset(k for k, _ in parts))
        b = _BackupJob(a.node_id, keys if parts[0][0] is _FULL else None,
                       evicting=evicting)
        intents = []
        for kind, ext in parts:
            job = self.sink.next_job_id()
            b.parts[job] = (kind, ext.num_pages)
            intents.append(_backup_intent(ext, job))
            if kind is _FULL:
                self.budget.host_reserved += ext.num_pages
            else:
                reserved = self.budget.host_pool_reserved
                reserved[ext.pool] = reserved.get(ext.pool, 0) + ext.num_pages
        self._backups[intents[0].job_id] = b
        for intent in intents:
            self._part_of[intent.job_id] = intents[0].job_id
        self.log(_backup(a.node_id, a.tokens))
        for intent in intents:
            self.sink.backup(intent)

    def _state_host_room(self, kind: Kind, pages: int) -> bool:
        """Make room for ``pages`` in ``kind``'s L2 state pool (dropping L2 copies of that
        component); False when it cannot (or the pool does not exist)."""
        free = self.budget.host_pool_free(kind)
        if free < pages and self.budget.host_pools.get(kind, 0) >= pages:
            self.apply(self.tree.residency.evict_host_component(kind, pages - free).actions)
        return self.budget.host_pool_free(kind) >= pages

    def backup_placed(self, job: int, host: CacheExtentRef) -> None:
        """The runtime allocated ``host`` for backup ``job`` (the copy is under way)."""
        self._backup_hosts[job] = host

    def on_transfer(self, c: TransferCompletion) -> bool:
        """Apply a backup or store completion; False for kinds the caller handles."""
        if c.kind is _BACKUP:
            self._backup_done(c.job_id)
        elif c.kind is _STORE:
            nodes, pin = self._stores.pop(c.job_id)
            self.tree.unlock(pin)
            if self.cache.hicache_buffer_only:
                self.drop_staging(nodes)
        else:
            return False
        return True

    def _backup_done(self, part: int) -> None:
        """One component's copy landed; the node's L2 copy enters the tree with the last."""
        job = self._part_of.pop(part)
        b = self._backups[job]
        kind, pages = b.parts.pop(part)
        b.hosts[kind] = self._backup_hosts.pop(part)
        if kind is _FULL:
            self.budget.host_reserved -= pages
        else:
            self.budget.host_pool_reserved[kind] -= pages
        if b.parts:
            return
        del self._backups[job]
        nodes = self.tree.residency.complete_backup(b.node_id, b.hosts)
        host = b.hosts.get(_FULL)
        if not self.l3 or host is None:
            return
        keys = b.keys if b.keys is not None else self.l3_keys(nodes)
        store = self.sink.next_job_id()
        # the L2 copy is read until L3 has it: pin it against L2 eviction
        self._stores[store] = (nodes, self.tree.locks.lock_host(nodes))
        self.sink.store(_store_intent(host, keys, store))

    def l3_keys(self, nodes: list[Node]) -> tuple[L3Key, ...]:
        """The page-hash keys of consecutive ``nodes`` (a backed-up span)."""
        return self._keys.span(nodes)

    def drop_staging(self, nodes: Iterable[Node]) -> None:
        """buffer_only: host memory was staging; free the L2 copy of nodes now on L1 (their
        KV is in L3 too). Host-only nodes leave through ordinary L2 eviction."""
        for n in nodes:
            if n.parent is None or not n.on_device or n.backing_up or n.locked(HOST):
                continue
            for kind in list(n.host):
                self.sink.free(self.tree.residency.pop_value(n, _HOST, kind))
            self.tree.residency.touched(n)
