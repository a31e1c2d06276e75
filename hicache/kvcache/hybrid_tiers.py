"""L2 for hybrid models: the ComponentTracker's load-back of FULL + SWA window + MAMBA
checkpoint in one plan, and the L2 state pools' budget (``track_components`` with
``enable_hierarchical_cache``).

    plan      a match's L1+L2 boundary, when its L2 part reaches load_back_threshold:
              what each component loads (hicache.tree.loadback), all or nothing
    admit     pin the L2 sources; FULL loads are the first slice's ``loads``, SWA pages
              and the MAMBA checkpoint on L2 sit in its ``attach`` in token order (the
              runtime loads them in the same plan: one crossing, page counts only)
    loaded    the runtime placed the loads: each extent joins its node's L1 data; one
              whose node got that data meanwhile (another request computed or loaded
              it) is the request's until it finishes, then freed
    backups   per component, in the cache manager (one job per component copy, each pool
              its own L2 budget: ``PageBudget.host_pools``)

Accounting (the tracker's invariant, per pool): device pages a load will take count as
pending from admission to ``loaded`` (FULL: ``PageBudget.loads_pending``).

Not L3: the storage backends key FULL pages by the page-hash chain; a MAMBA checkpoint is
one blob per node boundary and an SWA window a suffix of pages whose reuse needs the
checkpoint at the same boundary, so a prefetch would have to ask two key families and stop
at the deepest boundary holding both. The prefetch intent is FULL pages only; SGLang's
own MAMBA-to-L3 path (https://github.com/sgl-project/sglang/pull/36345) is still open.
The scheduler refuses ``track_components`` with an L3 backend, saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hicache.kvcache.decisions import Load
from hicache.kvcache.state import RequestState
from hicache.runtime.handles import CacheExtentRef
from hicache.runtime.interface import RuntimeInfo
from hicache.tree.components import Kind
from hicache.tree.loadback import ComponentLoads, plan_loads
from hicache.tree.node import Node
from hicache.tree.radix import MatchResult

if TYPE_CHECKING:
    from hicache.kvcache.components import ComponentTracker

STATE = (Kind.SWA, Kind.MAMBA)


class HybridTiers:
    """Collaborators: the component tracker (its tree, pools and cache manager)."""

    def __init__(self, tracker: ComponentTracker, info: RuntimeInfo) -> None:
        self.tracker, self.kv, self.tree = tracker, tracker.kv, tracker.tree
        kinds = self.tree.spec.kinds
        self.kv.budget.host_pools = {k: info.host_pages.get(k, 0)
                                     for k in STATE if k in kinds}
        self.pending = dict.fromkeys(STATE, 0)  # device pages (slots) loads will take
        self._landing: dict[int, tuple[list[Node], list[tuple[Node, Kind]]]] = {}

    def plan(self, m: MatchResult) -> ComponentLoads | None:
        """The loads worth doing for ``m`` (None: reuse the L1 boundary alone)."""
        if m.host_tokens <= 0 or m.host_tokens < self.kv.cache.load_back_threshold:
            return None
        loads = plan_loads(self.tree, m)
        return None if loads.empty else loads

    def admitted(self, st: RequestState, loads: ComponentLoads, device_tokens: int,
                 state_loads: list[tuple[Node, Kind]]) -> None:
        """``st`` reuses ``loads.path`` (its L2 sources already pinned as
        ``st.host_lock``): account the pending loads and log them."""
        st.load_nodes = list(loads.full)
        self.kv.budget.loads_pending += loads.pages(Kind.FULL)
        for kind in STATE:
            self.pending[kind] += loads.pages(kind)
        self._landing[st.rid] = (list(loads.full), state_loads)
        self.kv.log(Load(st.rid, loads.tokens - device_tokens))

    def loaded(self, st: RequestState, extents: Sequence[CacheExtentRef]) -> None:
        """The runtime placed ``st``'s loads (``PreparedSlice.loaded``: FULL, then state)."""
        landing = self._landing.pop(st.rid, None)
        if landing is None:
            return
        full, state = landing
        targets = [(n, Kind.FULL) for n in full] + state
        if len(targets) != len(extents):
            raise ValueError(f"request {st.rid}: {len(extents)} loaded extents for "
                             f"{len(targets)} loads")
        for (node, kind), ext in zip(targets, extents, strict=True):
            if kind is Kind.FULL:
                self.kv.budget.loads_pending -= ext.num_pages
            else:
                self.pending[kind] -= ext.num_pages
            if not self.kv.land(st, node, kind, ext) and kind is not Kind.FULL:
                self.tracker.own[kind] += ext.num_pages  # filled meanwhile: st's own
                st.reserved[kind] = st.reserved.get(kind, 0) + ext.num_pages

    def finish(self, st: RequestState) -> None:
        """Free the request's orphaned loads (its row is released in the same plan)."""
        self.kv.free_orphans(st)

    def write_through(self, st: RequestState, node: Node | None) -> None:
        """The write policy over the path the prompt's insert ended at (every component
        on L1 there is backed up with FULL, or alone when FULL is on L2 already). The
        parts an insert cuts above its new leaf (an SWA leaf's last window is a node of
        its own) count the hit the leaf counts: they are as new as it is, and a path
        backed up only below them would be deleted with them on L1 eviction."""
        if node is not None:
            path = list(self.tree.path_to_root(node))[::-1]
            self.kv.write_through(st, st.pages, path, min_hits=1)
