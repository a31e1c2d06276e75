"""One generation of the simulated runtime's memory: the tier pools, the request rows,
the state pools' keeper, the steady decode rows and the L2 pages waiting on backups;
and the placement of a plan's pages in them.

Invariants: everything here belongs to one generation (a restart builds a new Memory:
every earlier handle is stale, every pool empty); a page is either free in its pool or
held by exactly one of: an open row (:class:`sim.rows.RequestRow`), an extent the
control plane holds, a reservation in flight (a backup's or prefetch's L2 pages);
the pools hand out the lowest free ids first (``lifo``: the ablation's order), so what
a plan gets depends only on which ids are free; a plan is placed only after
:func:`sim.validate.check_plan` and :func:`sim.validate.check_capacity` passed
(:meth:`Memory.apply_frees`: with lowest-first pools its frees are checked as they are
given, before the capacity check, and taken back if either refuses), so no allocation
fails midway. :attr:`steady` holds the
rows of the last all-decode plan placed while they are as it says (:mod:`sim.steady`).
``rows``, ``device`` and ``host`` are never rebound (the runtime reads them as views).
"""

from __future__ import annotations

import simpy

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    RequestRuntimeHandle,
    Tier,
    extent_of_runs,
)
from hicache.runtime.interface import (
    BackupIntent,
    BatchPlan,
    Phase,
    PreparedSlice,
    Release,
    RequestSlice,
)
from hicache.runtime.page_ids import Run, pages_of, runs_of
from hicache.runtime.state import StateKeeper, state_loads
from sim import steady, validate
from sim.batch import BatchState, PendingBackup
from sim.pending import PendingPages
from sim.pools import PagePool, TierPools
from sim.rows import RequestRow
from sim.runtime_config import RuntimeConfig
from sim.transfers import Load

_FULL, _DEVICE, _HOST = Kind.FULL, Tier.DEVICE, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)
_DECODE = Phase.DECODE


class Memory:
    __slots__ = ("runtime_id", "generation", "page_size", "lowest", "device", "host",
                 "rows", "state", "full", "state_active", "next_slot", "steady", "pending")

    def __init__(self, config: RuntimeConfig, generation: int) -> None:
        self.runtime_id, self.generation = config.runtime_id, generation
        self.page_size = config.page_size
        self.lowest = config.order == "lowest"  # (apply_frees: frees checked as given)
        self.device = TierPools(_DEVICE, config.device_sizes, config.order)
        self.host = TierPools(_HOST, config.host_sizes, config.order)
        self.rows: dict[int, RequestRow] = {}
        self.state = StateKeeper(self.device, config.runtime_id, generation, self.page_size,
                                 config.swa_window, config.mamba, config.state_copy_s)
        # read once a plan or more (hot): the L1 FULL pool, and whether state pools are
        # kept (StateKeeper.active, fixed for its life: the runtime's window and mamba)
        self.full = self.device[_FULL]
        self.state_active = self.state.active
        self.next_slot = 0
        # the rows of the last placed all-decode plan, for the next plan to match
        # (sim.steady); dropped by any release (and here: every row is new)
        self.steady: steady.SteadyRows | None = None
        self.pending: dict[Kind, PendingPages] = {}  # pool -> L2 pages -> their backups

    def tier(self, tier: Tier) -> TierPools:
        if tier is _DEVICE:
            return self.device
        if tier is _HOST:
            return self.host
        raise ValueError(f"the runtime places no pages on tier {tier}")

    def extent(self, tier: Tier, runs: list[Run], pool: Kind,
               count: int | None = None) -> CacheExtentRef:
        """The extent of the pages of ``runs`` (an allocation's: coalesced already, so
        its runs are ``coalesce`` of its pages); ``count``: their pages, when the caller
        allocated that many (else counted when asked)."""
        return extent_of_runs(self.runtime_id, self.generation, tier, runs, pool, count)

    # ---- frees and releases -----------------------------------------------------------
    def apply_frees(self, plan: BatchPlan, l3: bool) -> validate.Checked:
        """A prepare's first half: check the whole plan (nothing changes unless it
        passes; ``l3``: the runtime has an L3 store), then apply its frees and
        releases; return what the checks found. Pools that hand out the lowest page
        first check each freed page as they free it (:meth:`_give`), before the capacity
        check (whose refusal takes them back): the same checks, in the same order."""
        if self.lowest:
            checked = validate.check_plan(self, plan, l3, give_checks=True)
            given = self._give(plan, checked) if checked.frees else []
            try:
                validate.check_capacity(self, plan, checked, given=True)
            except BaseException:
                for pool, runs in given:  # nothing changes: the pools as they were
                    pool.take_given(runs)
                raise
            for rel in plan.releases:
                self._release(rel, None)
            return checked
        checked = validate.check_plan(self, plan, l3)  # nothing changes before both pass
        validate.check_capacity(self, plan, checked)
        released = checked.released
        for ext in plan.frees:  # lifo: each extent's first page ends on top, extent by extent
            self.tier(ext.tier)[ext.pool].free_runs(ext.runs(), checked=True)
        for rel in plan.releases:
            self._release(rel, released[rel.request.slot_id])
        return checked

    def _give(self, plan: BatchPlan, checked: validate.Checked
              ) -> list[tuple[PagePool, list[Run]]]:
        """Free the runs of the plan's frees and its releases' L1 pages
        (:attr:`validate.Checked.frees` of ``give_checks``), each pool's at once (the
        pool's free runs are one form per set of free pages: any order leaves the same
        pool), checking each page as it is freed; return the pools and runs freed. A page
        not allocated or freed twice: every pool is taken back as it was and the plan is
        refused, named as :func:`validate.check_plan` names it."""
        given: list[tuple[PagePool, list[Run]]] = []
        tier = self.tier
        for (t, kind), runs in checked.frees.items():
            if not runs:
                continue
            pool = tier(t)[kind]
            if not pool.give_checked(runs):
                for done, back in given:
                    done.take_given(back)
                validate.refuse_frees(self, plan, checked.released)  # raises
                # it did not: a run of no pages (no PageRun has one), freed as none
                runs = [run for run in runs if run[1] > 0]
                if not pool.give_checked(runs):  # pragma: no cover - refused above
                    raise AssertionError("a free the checks passed was refused")
                for done, back in given:
                    done.give_checked(back)
            given.append((pool, runs))
        return given

    def _release(self, rel: Release, freed: list[Run] | None) -> None:
        """Close the row; ``freed``: the runs of its own pages the tree did not keep
        (None: freed already, :meth:`_give`)."""
        row = self.rows.pop(rel.request.slot_id)
        if self.steady is not None and row in self.steady.rows:  # (identity: no __eq__)
            self.steady = None  # it lists a closed row
        if freed is not None:
            self.full.free_runs(freed, checked=True)  # check_plan's runs
        if self.state_active:
            self.state.release(rel.request.slot_id, rel.kept())

    # ---- backups: L2 pages that wait for their copy -----------------------------------
    def backup(self, b: BackupIntent, done: simpy.Event) -> PendingBackup:
        """Reserve ``b``'s L2 pages; they wait on ``done`` (:meth:`pending_events`)."""
        pool = b.src.pool
        n = b.src.num_pages
        runs = self.host[pool].allocate_runs(n)
        pending = PendingBackup(b, self.extent(_HOST, runs, pool, n), b.src.runs(), runs, done)
        waits = self.pending.get(pool)
        if waits is None:
            waits = self.pending[pool] = PendingPages()
        waits.add(runs, done)
        return pending

    def pending_events(self, extent: CacheExtentRef) -> list[simpy.Event]:
        waits = self.pending.get(extent.pool)
        if not waits:
            return []
        return waits.events(extent.runs())

    def host_ready(self, extent: CacheExtentRef, done: simpy.Event) -> None:
        """``done`` fired: its L2 pages of ``extent`` wait for no backup any more (a page
        another backup took over keeps that one's event)."""
        waits = self.pending.get(extent.pool)
        if waits:
            waits.ready(extent.runs(), done)

    # ---- placement ----------------------------------------------------------------
    def place_steady(self, plan: BatchPlan
                     ) -> tuple[list[int], tuple[PreparedSlice, ...], tuple[int, ...]] | None:
        """Place a plan of slices alone (no intents) each of which repeats a row of
        :attr:`steady`, in its order (:mod:`sim.steady`: every row, or the rows of the
        requests still in the plan), with the pages they need free: its (decode
        contexts, prepared slices, finished rids); else None, and the general prepare
        decides. The same steps as the general path takes for such a plan (check_plan's
        match, the capacity of its new pages, the steady placement), without the plan's
        intents looked at one by one (it has none)."""
        sd, slices = self.steady, plan.slices
        if not slices or len(slices) > len(sd.rows):  # type: ignore[union-attr]
            return None  # (joined requests: the general prepare checks them)
        matched = sd.match(slices)  # type: ignore[union-attr]
        if matched is None or len(matched[1]) < len(slices):
            return None
        sd, contexts, new = matched
        if new is not sd.zeros and sum(new) > sd.pool.free_count:
            return None  # refused by the general check, with its message
        prepared = steady.place(sd, new, self.page_size)
        finished = tuple([s.rid for s in slices if s.finishes])
        self.steady = steady.without_finished(sd, slices, finished)
        return contexts, prepared, finished

    def place(self, plan: BatchPlan, checked: validate.Checked, st: BatchState,
              loads: list[Load]) -> tuple[PreparedSlice, ...]:
        """Each slice's pages and shape, in plan order. A request's later slice (most slices
        of a run: decode steps) takes the short path, with no state pools: the row and new
        page count the plan's check found, new pages if its tokens need them, and the same
        handle as last time when they do not (nothing of it changed); a first slice, or
        any with state pools, :meth:`_prepare_slice`. A plan that repeats the rows of the
        plan before (:mod:`sim.steady`) places only the pages its rows need; any other
        leaves its rows for the next plan to match, when it may. Each load (its pages
        placed) is appended to ``loads``."""
        slices = plan.slices
        if not slices:  # a cache-only plan: every row stays as it is
            return ()
        sd = checked.steady
        if sd is not None:  # check_plan matched its first slices to these rows
            st.decodes = checked.contexts  # type: ignore[assignment]  # 1-token decodes
            head = steady.place(sd, checked.new, self.page_size)
            if len(head) == len(slices):
                self.steady = steady.without_finished(sd, slices, st.finished)
                return head
            last, head_sd = None, sd
            prepared = head + self._place_each(slices[len(head):], checked.rows[len(head):],
                                               checked.new[len(head):], st, loads)
        else:
            last = self.steady if self.steady is not None and self.steady.current() else None
            head_sd = None
            prepared = self._place_each(slices, checked.rows, checked.new, st, loads)
        self.steady = (steady.after_prepare(last, head_sd, plan, checked, prepared,
                                            st.finished, self.full, self.page_size)
                       if not self.state_active else None)
        return prepared

    def _place_each(self, slices: tuple[RequestSlice, ...], rows: list[RequestRow | None],
                    news: list[int], st: BatchState, loads: list[Load]
                    ) -> tuple[PreparedSlice, ...]:
        """:meth:`place` slice by slice (``rows``, ``news``: the check's)."""
        short = not self.state_active
        allocate = self.full.allocate_runs
        prefills, decodes, decode = st.prefills, st.decodes, _DECODE
        out = []
        for s, row, new in zip(slices, rows, news, strict=True):
            if not short or row is None:
                out.append(self._prepare_slice(s, st, loads))
                continue
            if new:
                row.append_runs(allocate(new), own=True)  # joins runs that continue
            if s.phase is not decode:
                prefills.append((s.new_tokens, s.context_tokens))
            elif s.new_tokens == 1:
                decodes.append(s.context_tokens)
            else:
                decodes.extend([s.context_tokens] * s.new_tokens)
            out.append(row.prepared_slice())
        return tuple(out)

    def _prepare_slice(self, s: RequestSlice, st: BatchState, loads: list[Load]
                       ) -> PreparedSlice:
        """A slice's pages, loads and shape (:meth:`_place_each`: the short path that
        it takes when it may)."""
        if s.request is None:
            handle = RequestRuntimeHandle(self.runtime_id, self.next_slot, self.generation)
            self.next_slot += 1
            row = self.rows[handle.slot_id] = RequestRow(handle, s.rid)
            for ext in s.attach:
                if ext.pool is _FULL:
                    row.append_extent(ext)
            landed: list[CacheExtentRef] = []
            if self.state_active:  # hybrid: the attach's L2 state pieces are loaded back
                attach, copies, landed = state_loads(
                    s.attach, lambda pool, n: self.device[pool].allocate(n), self.runtime_id,
                    self.generation)
                for pool, src, dst in copies:
                    loads.append((pool, len(src), runs_of(src), runs_of(dst)))
                st.extra_s += self.state.open(handle.slot_id, attach, sum(
                    ld.src.num_pages for ld in s.loads if ld.src.pool is _FULL))
        else:
            row = self.rows[s.request.slot_id]
            landed = []
        loaded = []
        for ld in s.loads:  # the source's runs and the runs placed: no page listed
            src = ld.src
            pool, n = src.pool, src.num_pages
            runs = self.device[pool].allocate_runs(n)
            loads.append((pool, n, src.runs(), runs))
            ext = self.extent(_DEVICE, runs, pool, n)
            loaded.append(ext)
            if pool is _FULL:
                row.append_extent(ext)
        runs = self.full.allocate_runs(validate.new_pages(self, s, row.size))
        row.append_runs(runs, own=True)
        state: tuple[CacheExtentRef, ...] = ()
        if self.state_active:
            state, seconds = self.state.advance(row.handle.slot_id, s, row.size,
                                                pages_of(runs))
            st.extra_s += seconds
        if s.phase is Phase.PREFILL:
            st.prefills.append((s.new_tokens, s.context_tokens))
        else:
            st.decodes.extend([s.context_tokens] * s.new_tokens)
        return PreparedSlice(s.rid, row.handle, row.extent(), (*loaded, *landed), state)
