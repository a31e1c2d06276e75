"""The scheduler's SWA and MAMBA side (``scheduler.track_components``).

    admit     match the prompt (less its last token) -> reuse up to the boundary every
              component accepts; attach FULL pages up to it, the SWA pages of the window
              before it and the MAMBA checkpoint at it (the runtime copies it: COW)
    plan      the prefill slice that ends at the prompt's last full page asks for a
              checkpoint (a chunk is cut there if needed)
    cache     at prefill end insert FULL (new pages), SWA (the checkpoint's held window,
              within the new pages) and MAMBA (the checkpoint); donate what the tree took.
              Without MAMBA each earlier chunk end is a checkpoint too, inserted (and its
              window SWA-locked until the Release) when its slice completes, as SGLang's
              cache_unfinished_req does: a prefix shared into a later chunk reuses up to
              the chunk end before it
    account   per pool: full as before; swa: a bound on the pages a running request holds
              between slices (window + pinned window), plus one slice's pages held back
              for the whole pool (the runtime frees a slice's out-of-window pages as it
              allocates them, one slice at a time); mamba: private slot + checkpoint; the
              tree's pages are counted by the tree. A short pool evicts its own component.

With L2 (hybrid_tiers.py) admission reuses up to the L1+L2 boundary, loading FULL, the
SWA window and the MAMBA checkpoint in the first slice, and backups copy every component.

Invariant: for each pool, runtime-allocated pages <= tree-held + reserved by running
requests + pending loads <= pool size, so the runtime never runs out (it raises if it
would).

``zero_time`` (replay: the cache manager driven one request at a time) reserves what a
request holds when it computes in no time: the SWA pages of its last window and one MAMBA
checkpoint, no running state beside them.
"""

from __future__ import annotations

import math
from collections import Counter

from hicache.kvcache.decisions import Admit
from hicache.kvcache.hybrid_tiers import HybridTiers
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.interface import PreparedSlice, RequestSlice, RuntimeInfo
from hicache.tree.actions import FreeDevice
from hicache.tree.components import Kind
from hicache.tree.loadback import ComponentLoads
from hicache.tree.node import Node
from hicache.tree.radix import MatchResult

POOLS = (Kind.FULL, Kind.SWA, Kind.MAMBA)  # a Release keeps its extents in this order
STATE = (Kind.SWA, Kind.MAMBA)


class ComponentTracker:
    """Collaborators: the cache manager (its tree, FULL page budget, intent sink and
    decision log); ``info`` sizes the state pools, ``chunk_tokens`` bounds a prefill chunk."""

    def __init__(self, kv: KVCacheManager, info: RuntimeInfo, chunk_tokens: int, *,
                 zero_time: bool = False) -> None:
        self.kv, self.tree, self.page = kv, kv.tree, kv.page
        self.zero_time = zero_time
        spec = self.tree.spec
        self.swa = spec.get(Kind.SWA) is not None
        self.mamba = spec.get(Kind.MAMBA) is not None
        self.window_pages = math.ceil(info.swa_window / self.page) if self.swa else 0
        self.chunk_pages = math.ceil(chunk_tokens / self.page)
        self.total = {k: info.device_pages.get(k, 0) for k in STATE}
        self.own = dict.fromkeys(STATE, 0)
        self.slices: Counter[int] = Counter()  # per running request: its largest slice
        self._chunks: dict[tuple[int, int], tuple[CacheExtentRef, ...]] = {}  # (rid, end)
        self.tiers = HybridTiers(self, info) if kv.l2 else None

    # -- accounting ------------------------------------------------------------------
    def free(self, pool: Kind) -> int:
        if pool is Kind.FULL:
            return self.kv.budget.device_free()
        pending = self.tiers.pending[pool] if self.tiers is not None else 0
        transient = self.transient() if pool is Kind.SWA else 0
        return (self.total[pool] - self.tree.held_pages(Tier.DEVICE, pool)
                - self.own[pool] - pending - transient)

    def transient(self) -> int:
        """SWA pages held back for the slice being allocated: the most any running request
        holds during a slice beyond its between-slice bound (a slice allocates before its
        out-of-window pages are freed, and slices allocate one at a time)."""
        return max(self.slices) if self.slices else 0

    def slice_pages(self, st: RequestState) -> int:
        """SWA pages ``st`` may hold during a slice beyond what it holds between slices:
        at most ``2w + chunk + 2`` pages while a slice allocates, ``2w + 2`` otherwise
        (each bounded by its new pages)."""
        if not self.swa or self.zero_time:
            return 0
        new, w = self.new_pages(st), self.window_pages
        return min(new, 2 * w + self.chunk_pages + 2) - min(new, 2 * w + 2)

    def new_pages(self, st: RequestState) -> int:
        return (math.ceil((st.prompt_len + st.output_len) / self.page)
                - st.prefix_tokens // self.page)

    def reserve(self, st: RequestState) -> dict[Kind, int]:
        """Pages (slots) of each state pool the request may hold at once, at most."""
        page = self.page
        out = {}
        if self.zero_time:  # the window the tree keeps, the checkpoint it takes
            new = len(st.pages) - st.prefix_tokens // page
            if self.swa:
                out[Kind.SWA] = min(new, self.window_pages)
            if self.mamba:
                out[Kind.MAMBA] = int(new > 0)
            return out
        new = self.new_pages(st)
        if self.swa:  # the window (w + 1 pages unaligned) and the pinned window
            out[Kind.SWA] = min(new, 2 * self.window_pages + 2)
        if self.mamba:
            out[Kind.MAMBA] = 1 + self.checkpoints(st)
        return out

    def checkpoints(self, st: RequestState) -> bool:
        return (self.swa or self.mamba) and len(st.pages) > st.prefix_tokens // self.page

    def make_room(self, needs: dict[Kind, int]) -> bool:
        """Evict, per short pool, that pool's component until every need fits."""
        for _ in range(16):
            short = [(p, n - self.free(p)) for p, n in needs.items() if self.free(p) < n]
            if not short:
                return True
            moved = False
            for pool, deficit in short:
                if pool is Kind.FULL and self.kv.l2:  # L1 leaves go through write_back
                    self.kv.make_room(Tier.DEVICE, needs[pool])
                    moved |= self.free(pool) > needs[pool] - deficit
                    continue
                res = self.tree.evict_device(deficit, pool)
                if res.actions:
                    self.kv.apply(res.actions)
                    moved = True
            if not moved:
                return False
        return all(self.free(p) >= n for p, n in needs.items())

    # -- admission -------------------------------------------------------------------
    def never_fits(self, st: RequestState) -> str | None:
        """Why ``st`` can never be admitted (a pool is too small even when empty), or None."""
        full = self.kv.never_fits(st)
        if full is not None:
            return full
        prefix = st.prefix_tokens
        st.prefix_tokens = 0  # the most it can need: nothing reused
        needs = self.reserve(st)
        if self.swa:
            needs[Kind.SWA] += self.slice_pages(st)
        st.prefix_tokens = prefix
        for pool, n in needs.items():
            if n > self.total[pool]:
                name = pool.value
                return (f"exceeds_{name}_pool: needs {n} {name} pages at once, the {name} "
                        f"pool holds {self.total[pool]}")
        return None

    def start(self, st: RequestState) -> bool:
        """Admit ``st``: reuse up to the boundary every component accepts, on L1 or, with
        L2, on L1 and L2 (loading what is on L2 only)."""
        return self.admit(st, self.match(st))

    def match(self, st: RequestState) -> MatchResult:
        """Match ``st``'s prompt, touching it (less its last token unless the manager
        reuses whole prompts)."""
        pages = (st.pages[:(st.prompt_len - 1) // self.page] if self.kv.recompute_last_token
                 else st.pages)
        return self.tree.match(pages)

    def admit(self, st: RequestState, m: MatchResult) -> bool:
        """Reserve what ``st`` needs beyond the ``m`` it reuses (and the loads of its L2
        part); False (nothing held) when a pool cannot make room now."""
        dev = m.device_tokens
        loads = self.tiers.plan(m) if self.tiers is not None else None
        nodes = m.path[:m.device_nodes] if loads is None else loads.path
        tokens = dev if loads is None else loads.tokens
        lock = self.tree.lock(nodes[-1] if nodes else None)
        pin = self.tree.locks.lock_host(loads.sources) if loads is not None else None
        st.prefix_tokens = tokens
        reserve = {Kind.FULL: self.kv.footprint(st), **self.reserve(st)}
        needs = dict(reserve)
        slice_pages = self.slice_pages(st)
        if slice_pages > self.transient():
            needs[Kind.SWA] += slice_pages - self.transient()
        if loads is not None:
            for kind in needs:
                needs[kind] += loads.pages(kind)
        if not self.make_room(needs):
            self.tree.unlock(lock)
            if pin is not None:
                self.tree.unlock(pin)
            st.prefix_tokens = 0
            return False
        st.lock, st.host_lock = lock, pin
        state, landing = self._state_extents(nodes, tokens, loads)
        on_l1 = nodes if loads is None else nodes[:len(nodes) - len(loads.full)]
        st.attach = self.kv.device_extents(on_l1, tokens) + state
        st.device_hit, st.host_hit, st.l3_hit = dev, tokens - dev, 0
        st.reserved = {p: n for p, n in reserve.items() if p is not Kind.FULL}
        self.kv.budget.own += reserve[Kind.FULL]
        for p, n in st.reserved.items():
            self.own[p] += n
        if slice_pages:
            st.slice_pages = slice_pages
            self.slices[slice_pages] += 1
        self.kv.log(Admit(st.rid, dev, tokens - dev, 0))
        if loads is not None:
            assert self.tiers is not None
            self.tiers.admitted(st, loads, dev, landing)
        return True

    def _state_extents(self, nodes: tuple[Node, ...], tokens: int,
                       loads: ComponentLoads | None = None
                       ) -> tuple[tuple[CacheExtentRef, ...], list[tuple[Node, Kind]]]:
        """The SWA pages of the window ending at ``tokens`` and the MAMBA checkpoint
        there, in token order, each from L1 or (``loads``) from L2; and the (node,
        component) of each L2 piece, in that order."""
        if not tokens:
            return (), []
        out: list[tuple[CacheExtentRef, Node]] = []
        need = min(self.window_pages, tokens // self.page) if self.swa else 0
        for n in reversed(nodes):
            if need <= 0:
                break
            ext = n.device.get(Kind.SWA) or n.host[Kind.SWA]
            take = min(need, ext.num_pages)
            if take < ext.num_pages:
                assert ext.tier is Tier.DEVICE, "an L2 window piece is a whole node"
                ext = ext.slice(ext.num_pages - take, ext.num_pages)
            out.insert(0, (ext, n))
            need -= take
        if self.mamba:
            last = nodes[-1]
            out.append((last.device.get(Kind.MAMBA) or last.host[Kind.MAMBA], last))
        landing = [(n, e.pool) for e, n in out if e.tier is Tier.HOST]
        assert loads is not None or not landing
        return tuple(e for e, _ in out), landing

    # -- planning and runtime answers --------------------------------------------------
    def cut(self, st: RequestState, pos: int, chunk: int) -> tuple[int, bool]:
        """Shorten a prefill chunk to end at the checkpoint; say whether it ends at one.
        Without MAMBA every chunk that ends before the prompt's last full page ends on a
        page and checkpoints too (SGLang's ``cache_unfinished_req``: the tree gets the
        live window at each chunk end, so a prefix shared up to inside a later chunk is
        reusable up to the chunk end before it)."""
        if not self.checkpoints(st):
            return chunk, False
        at = len(st.pages) * self.page
        if pos < at < pos + chunk:
            chunk = at - pos
        end = pos + chunk
        if end < at and not self.mamba:
            if end % self.page and chunk > end % self.page:
                chunk -= end % self.page
            return chunk, (pos + chunk) % self.page == 0
        return chunk, end == at

    def chunk_cached(self, st: RequestState, sl: RequestSlice) -> Node | None:
        """A checkpoint slice before the prompt's last full page completed: insert the
        prompt up to its end with the window held there (the request keeps its reserve:
        it pins one more window at its next checkpoint)."""
        end = sl.context_tokens + sl.new_tokens
        state = self._chunks.pop((st.rid, end), None)
        if state is None:  # the prompt's checkpoint: cached at prefill end
            return None
        node = self._insert(st, end // self.page, state, final=False)
        if node is not None:  # its pinned window stays the request's until the Release
            st.chunk_locks.append(self.tree.lock(node, (Kind.SWA,)))
        return node

    def prepared(self, st: RequestState, sl: RequestSlice, ps: PreparedSlice) -> None:
        if sl.checkpoint:
            end = sl.context_tokens + sl.new_tokens
            if end < len(st.pages) * self.page:  # a chunk end: cached on completion
                self._chunks[(st.rid, end)] = ps.state
            else:
                st.checkpoint = ps.state
        if self.tiers is not None and ps.loaded:
            self.tiers.loaded(st, ps.loaded)

    # -- caching and release ---------------------------------------------------------
    def cache_prompt(self, st: RequestState) -> Node | None:
        return self._insert(st, len(st.pages), st.checkpoint, final=True)

    def _insert(self, st: RequestState, n: int, checkpoint: tuple[CacheExtentRef, ...],
                *, final: bool) -> Node | None:
        """Insert the prompt's first ``n`` pages with the state held at page ``n``; the
        request donates what the tree took (``final``: its state reserve shrinks by it)."""
        first = st.prefix_tokens // self.page
        if n <= first or st.kv is None or st.kv.num_pages < n:
            return None
        values = {Kind.FULL: st.kv.slice(first, n)}
        for ext in checkpoint:
            if ext.pool is Kind.SWA:  # the run ends at the checkpoint's last page
                take = min(ext.num_pages, n - first)
                values[Kind.SWA] = ext.slice(ext.num_pages - take, ext.num_pages)
            elif ext.pool is Kind.MAMBA:
                values[Kind.MAMBA] = ext
        res = self.tree.insert(st.pages[:n], values, inserted=self.kv.inserted(st, n))
        skip: dict[Kind, set[int]] = {}  # duplicates the tree did not take, pages given before
        for a in res.actions:
            if isinstance(a, FreeDevice):
                skip.setdefault(a.kind, set()).update(a.extent.pages())
        for kind, before in st.state_donated.items():
            for e in before:
                skip.setdefault(kind, set()).update(e.pages())
        for kind, ext in values.items():
            if kind in skip:
                own = [p for p in ext.pages() if p not in skip[kind]]
                if not own:
                    continue
                taken, count = ext.with_pages(own), len(own)
            else:  # the common case: the tree took every page
                taken, count = ext, ext.num_pages
            st.state_donated.setdefault(kind, []).append(taken)
            if kind is Kind.FULL:
                st.donated.append(taken)
                st.donated_pages += count
                self.kv.budget.own -= count
            elif final:
                self.own[kind] -= count
                st.reserved[kind] -= count
        return res.node

    def finish(self, st: RequestState) -> tuple[CacheExtentRef, ...]:
        """Return the request's reservations; the extents its Release keeps."""
        for p, n in st.reserved.items():
            self.own[p] -= n
        st.reserved = {}
        if st.slice_pages:
            self.slices[st.slice_pages] -= 1
            if not self.slices[st.slice_pages]:
                del self.slices[st.slice_pages]
            st.slice_pages = 0
        for key in [k for k in self._chunks if k[0] == st.rid]:
            del self._chunks[key]
        for lock in st.chunk_locks:
            self.tree.unlock(lock)
        st.chunk_locks = []
        if self.tiers is not None:
            self.tiers.finish(st)
        return tuple(CacheExtentRef.concat(st.state_donated[p]) for p in POOLS
                     if st.state_donated.get(p))
