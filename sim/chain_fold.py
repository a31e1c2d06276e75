"""Chain folding: a batch's layer-wise load chain and its compute as one simulated event.

A layer-wise batch loads its prefix group by group (:mod:`sim.load_chain`): per group a
launch-overhead timer, a copy kernel on the PCIe link, and the layers it lands started
by :mod:`sim.compute_chain`, each slowed while a kernel holds SMs. When the fluid server
holds nothing but this batch's compute job and L3 jobs whose split is steady (the
conditions under which :meth:`sim.link.PcieLink.shift_rate` answers), nothing but the
chain itself changes a rate until something from outside enters the server, so the
chain's transitions follow in closed form. :class:`ChainFold` computes them at one of
the chain's own steps (:meth:`LoadChain._next <sim.load_chain.LoadChain._next>`, a
group about to launch) with the float operations the server would do, and arms ONE
timer, at the last kernel's landing (or the first tie among its transitions)::

    step (g launches at end+overhead)  ... transitions, computed now ...     T_end
    |-- K_g joins: C slowed -- K_g lands: C at 1, layers land, C' starts --|  _finish(K)
        every change splits C's and K's remaining (and the L3 jobs', via
        FluidServer.expect's catch-up), a due re-computed at each rate change

    an outside entry (_start, _finish, replan, cancel, adopt, expect) at t < T_end:
        materialise(t): rows, counts and chain state of the transitions <= t; K, C on
        the server with their exact remaining, rate, due and live timers; the pending
        launch timer and promise; the fold is over (it folds again at its next step)

    an L3 transfer joining or leaving at t (absorb; no host-memory squeeze possible):
        K's and C's remaining split at t as the server's _advance splits them, kept as
        a transition at t; the transitions after t walked again from there, up to a
        kept state equal to the old walk's (the old transitions after it kept as they are)

A backup's d2h copy kernel D on the link (and nothing else on it) joins the fold as a
third job, off the server like the compute: its rate is allocate's, scaled by the
bidirectional cap while a kernel loads and back at the landing (:class:`Beside`), its
remaining split at every change and its due re-computed at each rate change; the compute
runs slowed throughout (D holds SMs). D's finish is an outside event (the backup done):
the fold ends there (materialise, then D's real finish) or earlier::

    step   K_g joins: D scaled, due later  -- K_g lands: D at its lone rate --  D due
    |------------------------------------------------------------------------|_finish(D)
    (materialised earlier: D back at its place, remaining, rate, due; a timer at its due)

Invariant: the server, the chains and the timeline are, after :meth:`ChainFold.
materialise` at t, what the unfolded run has after its events at t (bit for bit: the
same ``remaining -= rate * dt`` at each change of the job set, ``due = t + max(0,
remaining) / rate`` at each rate change, a launch at ``end + overhead``); only the
order among events at exactly one time may differ, which the fingerprint checks.
``run.fold_layers: false`` turns folding off (:attr:`SimRuntime.fold_layers
<sim.runtime.SimRuntime>`); ``SimRuntime.fold_counts`` counts what the folds did (``chain_*``:
chain steps that tried to fold, folds begun, kernels launched within folds, folds an
outside entry materialised early, folds cut at a tie among their own transitions, L3
changes absorbed, absorbed changes whose walk again met the old one).
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, NamedTuple

from sim.compute_chain import ComputeChain
from sim.fluid import FluidJob
from sim.streams import call_exactly

if TYPE_CHECKING:
    from sim.fluid import FluidServer
    from sim.link import PcieLink
    from sim.load_chain import LoadChain

# at most this many kernels launched per fold (None: no limit): a fold that reaches it
# ends just before the next launch, as at a tie (its pending steps re-armed as timers);
# the tests set it small to exercise that end
SPAN: int | None = None

# a fold keeps the chain's state after every CHECK-th transition: a fold materialised
# early walks its transitions again from the last one kept before its time (_state)
CHECK = 8

# a load chain folds beside a d2h copy kernel (a backup's) too, up to its finish (False:
# no fold while one is on the link; the tests compare the two)
BESIDE_COPY = True

# a deadline closer than this (relative) to an L3 job's finish: sim.l3_client.watch's
# check could flip with the splits' rounding, so no fold
_WATCH_MARGIN = 1e-6


def _compute_slot(chain: LoadChain, fluid: FluidServer
                  ) -> tuple[ComputeChain | None, FluidJob | None] | None:
    """The batch's compute chain when it waits for a layer or runs one, and the compute
    job on the server (the batch's, or a foreign one: the batch's compute has not begun),
    when every other job there is an L3 transfer; None: no fold."""
    st = chain.st
    landed = st.landed
    assert landed is not None
    cc: ComputeChain | None = None
    waiter = landed.waiter
    if waiter is not None:
        if getattr(waiter, "__func__", None) is not ComputeChain._layer_start:
            return None
        cc = waiter.__self__  # type: ignore[attr-defined]
        if cc.st is not st or landed.at != cc.layer:
            return None
    job: FluidJob | None = None
    for other in fluid.jobs:
        if other.kind == "l3" or other.kind == "d2h":  # (a d2h copy: try_fold's)
            continue
        if job is not None or other.kind != "compute":
            return None
        job = other
    if job is None:
        return cc, None
    then = job.then
    if getattr(then, "__func__", None) is ComputeChain._layer_done:
        owner = then.__self__  # type: ignore[union-attr]
        if owner.st is st:
            return (owner, job) if cc is None else None
    return (None, job) if cc is None else None


class ChainFold:
    """One folded span of a load chain (module doc)."""

    def __init__(self, chain: LoadChain, cc: ComputeChain | None, job: FluidJob | None,
                 copy: FluidJob | None = None) -> None:
        # cc: the batch's compute chain, attached (None: not yet; ``job``, if any, is
        # another batch's compute job, whose finish ends the fold); ``copy``: a d2h copy
        # kernel beside (Beside), whose finish ends the fold
        self.chain, self.cc, self.c0, self.d = chain, cc, job, copy
        rt = chain.rt
        self.fluid = rt.fluid
        jobs = rt.fluid.jobs
        self.c0_index = jobs.index(job) if job is not None else -1
        self.d_index = jobs.index(copy) if copy is not None else -1
        # per transition (a compute start shares the entry of the transition at its
        # time): its time (a change of the server's job set: the L3 jobs' splits); the
        # timeline rows of them all, in order (_walk)
        self.times: list[float] = []
        self.rows: list[tuple] = []
        # states kept (_walk resumes from one): the chain's state after a transition, the
        # time of the last change then and the kernel's next transition; after every
        # CHECK-th transition (check_at: how many transitions before each), after an L3
        # change absorbed, and after the last one (last_check)
        self.checks: list[tuple] = []
        self.check_at: list[int] = []
        self.last_check: tuple = ()
        self.charged = 0  # transitions the server's jobs were charged at (absorb)
        self.end = math.inf
        self.final = False  # the fold ends at the last kernel's landing
        self.final_c = False  # the fold ends at the foreign compute job's finish
        self.final_d = False  # the fold ends at the d2h copy's finish
        self.k_rate = self.slow = 0.0  # the kernels' rate, the compute's beside one
        self.free = 1.0  # the compute's rate with no h2d kernel (slow beside a d2h copy)
        self.beside: Beside | None = None  # the d2h copy's rates (None: no copy)
        self.t_plan = self.last0 = 0.0  # when plan ran; the server's last change then

    # -- the closed form ---------------------------------------------------------------
    def plan(self, k_rate: float, slow: float, beside: Beside | None = None) -> bool:
        """Compute the transitions from now to the fold's end; False: too short. Each
        transition appends its time to :attr:`times` and the timeline rows it records to
        :attr:`rows`; the chain's state after the last one is :attr:`last_check` (what
        :meth:`materialise` restores at the end), and every :data:`CHECK` transitions
        one is kept in :attr:`checks` (from which :meth:`_state` walks to an earlier
        time). A compute job starting at the time of the transition before (a layer's
        end, a landing) shares its entry, as no entry can come between them (a second
        change at one time charges nothing)."""
        self.k_rate, self.slow = k_rate, slow
        self.beside = beside
        self.free = 1.0 if beside is None else slow  # (a copy kernel holds SMs)
        self.t_plan, self.last0 = self.chain.rt.env.now, self.fluid.last_change
        return self._walk(self.times, self.rows, CHECK, planning=True) is not None

    def _state(self, n: int) -> tuple:
        """The chain's state after the first ``n`` transitions (0 <= n < len(times)),
        with the time of the last change then and the kernel's next transition:
        :meth:`_walk` again from the last state kept at or before it (or the fold's
        start), which makes the same float operations on the same inputs (the fold holds
        the chain, its compute and ``c0`` unchanged), so the same transitions; their
        rows go to a list thrown away."""
        i = bisect.bisect_right(self.check_at, n) - 1
        if i < 0:
            state = self._walk([], [], n)
        elif self.check_at[i] == n:
            state = self.checks[i]
        else:
            state = self._walk([], [], n - self.check_at[i], self.checks[i])
        assert state is not None
        return state

    def _walk(self, times: list[float], rows: list[tuple], stop: int,
              start: tuple | None = None, planning: bool = False,
              old: list[tuple] | None = None) -> tuple | int | None:
        """The transitions from the fold's start (:meth:`plan`'s time; or from a kept
        state, ``start``: an entry of :attr:`checks`), their times to ``times`` and their
        timeline rows to ``rows``. ``planning`` (:meth:`plan`: ``stop`` is
        :data:`CHECK`, no ``start``): up to the fold's end, which it records
        (:attr:`end`, :attr:`final`, :attr:`final_c`, :attr:`last_check`,
        :attr:`checks`), returning that state, or None when the fold is too short.
        Otherwise (:meth:`_state`): the state after the ``stop``-th transition walked
        (the fold's start with ``stop`` 0), as a kept one.

        The state after a transition: (k_rem, c_rem, c_rate, c_due, rows so far,
        launches so far, bytes landed so far, k_active, c_active, c_fresh, k_first,
        chain.g, landed.count, chain.t0, chain.start_t, cc.layer, cc.t0, cc.start_t,
        d_rem, d_rate, d_due: the d2h copy's, 0.0, 0.0, inf without one); a kept one
        adds the time of the last change and the kernel's next transition.

        ``old`` (:meth:`absorb`: ``stop`` the transitions up to the first of them): the
        states kept after the absorbed change by the walk before it, each a transition
        earlier; at the first state kept that equals its old one (bit for bit: every
        transition after it is the old walk's) the walk stops and returns its index."""
        chain, cc = self.chain, self.cc
        rt, st = chain.rt, chain.st
        groups = st.load_groups
        assert st.load_steps is not None  # (prepare sets both)
        k_work, lands, last_load = st.load_steps
        own = cc is not None
        times_l = cc.times if cc is not None else ()
        landed = st.landed
        assert landed is not None
        overhead = rt.copies.overhead
        k_rate, slow, free = self.k_rate, self.slow, self.free
        beside = self.beside
        has_d = beside is not None
        d_lone, d_both = (beside.lone, beside.both) if beside is not None else (0.0, 0.0)
        add_time, add_row = times.append, rows.append
        op = cc.op if cc is not None else ""
        bid = st.plan.batch_id
        merged = 0  # transitions sharing an entry with the one before (the same time)
        span = SPAN if SPAN is not None else len(groups)  # launches in all, at most
        if start is None:
            now = self.t_plan
            last = self.last0
            g = chain.g
            k_active = False
            k_rem = 0.0
            c = self.c0
            c_active = c is not None
            c_fresh = not c_active  # the compute job in flight is not c0
            k_first = False  # the kernel joined before the compute job in flight
            if cc is not None:
                layer, cc_t0, cc_start = cc.layer, cc.t0, cc.start_t
            else:
                layer, cc_t0, cc_start = 0, 0.0, 0.0
            t0, start_t = chain.t0, chain.start_t
            n_rows = n_launch = moved = 0
            if c is not None:
                c_rem, c_rate, c_due = c.remaining, c.rate, c.due
                if not c_due > now:
                    return None  # its finish is due now: a tie with this step
            else:
                c_rem = c_rate = 0.0
                c_due = math.inf
            d = self.d
            if d is not None:
                d_rem, d_rate, d_due = d.remaining, d.rate, d.due
                if not d_due > now:
                    return None  # the copy's finish is due now: a tie with this step
            else:
                d_rem = d_rate = 0.0
                d_due = math.inf
            count = landed.count
            # the kernel's next transition: its launch (simpy's now + delay), or landing
            nxt_k = now + overhead
        else:
            ((k_rem, c_rem, c_rate, c_due, n_rows, n_launch, moved, k_active, c_active,
              c_fresh, k_first, g, count, t0, start_t, layer, cc_t0, cc_start,
              d_rem, d_rate, d_due), last, nxt_k) = start
        if not (stop or planning):
            return ((k_rem, c_rem, c_rate, c_due, n_rows, n_launch, moved, k_active,
                     c_active, c_fresh, k_first, g, count, t0, start_t, layer, cc_t0,
                     cc_start, d_rem, d_rate, d_due), last, nxt_k)
        waiting = own and not c_active
        n_layers = len(times_l)
        inf = math.inf
        checks, check_at = self.checks, self.check_at
        old_i = 0
        while True:  # a stretch of transitions up to the fold's end or a kept state
            while True:
                if d_due <= nxt_k and d_due <= c_due:  # the d2h copy finishes (inf: none)
                    tc = d_due
                    if d_due == nxt_k or d_due == c_due:
                        rt.fold_counts["chain_ties"] += 1  # (the event order's)
                    else:
                        self.final_d = True  # its real finish ends the fold
                    break
                if c_due < nxt_k:  # the compute job in flight finishes (c_due: inf if none)
                    tc = c_due
                    if not own:
                        self.final_c = True
                        break  # the other batch's job finishes: its real finish ends the fold
                    if layer + 1 >= n_layers:
                        break  # the batch's last layer: its sample follows (not folded)
                    dt = tc - last
                    if dt > 0:
                        if k_active:
                            k_rem -= k_rate * dt
                        c_rem -= c_rate * dt
                        if has_d:
                            d_rem -= d_rate * dt
                    last = tc
                    c_active = False
                    add_row(("compute", op, bid, -1, layer, cc_t0, tc, 0, 1))
                    n_rows += 1
                    layer += 1
                    if layer < count:  # the next layer starts at once: one entry for both
                        c_rem = times_l[layer]
                        c_rate = slow if k_active else free
                        c_due = tc + c_rem / c_rate
                        c_active = c_fresh = True
                        k_first = k_active
                        cc_t0 = tc  # layer > 0: start_t stays
                        merged += 1
                    else:
                        c_due = inf
                        waiting = True
                    add_time(tc)
                    stop -= 1
                    if not stop:
                        break
                    continue
                tc = nxt_k
                if c_due == tc:  # a tie: which goes first is the event order's
                    rt.fold_counts["chain_ties"] += 1
                    break
                if not k_active:  # the launch of group g
                    if n_launch >= span:
                        break  # the span's end: this launch runs unfolded
                    dt = tc - last
                    if dt > 0:
                        if c_active:
                            c_rem -= c_rate * dt
                        if has_d:
                            d_rem -= d_rate * dt
                    last = tc
                    k_rem = k_work[g]
                    k_active = True
                    k_first = False  # it joins after the compute job in flight, if any
                    n_launch += 1
                    start_t = tc
                    if c_active and c_rate != slow:
                        c_rate = slow
                        c_due = tc + (c_rem if c_rem > 0.0 else 0.0) / c_rate
                    if has_d and d_rate != d_both:  # the bidirectional cap binds
                        d_rate = d_both
                        d_due = tc + (d_rem if d_rem > 0.0 else 0.0) / d_rate
                    nxt_k = tc + k_rem / k_rate  # its landing
                    add_time(tc)
                    stop -= 1
                    if not stop:
                        break
                    continue
                # the kernel of group g lands
                if g >= last_load:  # no group after g has bytes
                    self.final = True
                    break  # the last one: its real finish ends the fold
                dt = tc - last
                if dt > 0:  # (the kernel's remaining: 0 now)
                    if c_active:
                        c_rem -= c_rate * dt
                    if has_d:
                        d_rem -= d_rate * dt
                last = tc
                k_active = False
                k_rem = 0.0
                if c_active and c_rate != free:
                    c_rate = free
                    c_due = tc + (c_rem if c_rem > 0.0 else 0.0) / free  # (/ 1.0: exact)
                if has_d and d_rate != d_lone:
                    d_rate = d_lone
                    d_due = tc + (d_rem if d_rem > 0.0 else 0.0) / d_rate
                glayer, nb, nbytes, count, g = lands[g]  # (groups without bytes: with it)
                add_row(("h2d", "load", bid, -1, glayer, t0, tc, nb, 1))
                add_row(("pcie:h2d", "load", bid, -1, glayer, start_t, tc, nb, 1))
                n_rows += 2
                moved += nbytes
                t0 = tc
                if waiting and layer < count:  # the batch's compute goes on at once: one entry
                    waiting = False
                    c_rem = times_l[layer]
                    c_rate = free
                    c_due = tc + c_rem / free  # (/ 1.0: exact)
                    c_active = c_fresh = True
                    k_first = False
                    cc_t0 = tc
                    if layer == 0:
                        cc_start = tc
                    merged += 1
                add_time(tc)
                nxt_k = tc + overhead  # the next launch
                stop -= 1
                if not stop:
                    break
            state = (k_rem, c_rem, c_rate, c_due, n_rows, n_launch, moved, k_active,
                     c_active, c_fresh, k_first, g, count, t0, start_t, layer, cc_t0,
                     cc_start, d_rem, d_rate, d_due)
            if stop or not planning:
                break  # the fold's end (or the stop-th transition walked: _state)
            kept = (state, last, nxt_k)
            checks.append(kept)  # after CHECK more transitions
            check_at.append(len(times))
            stop = CHECK
            if old is not None:
                if _same(kept, old[old_i]):
                    return old_i  # the old walk's from here (absorb splices it)
                old_i += 1
                if old_i == len(old):
                    old = None
        if not planning:
            assert not stop, "fewer transitions than asked"
            return state, last, nxt_k
        self.end = tc
        self.last_check = (state, last, nxt_k)
        # fewer transitions: the fold's own timer saves no event
        return state if len(times) + merged >= 2 else None

    # -- entering and leaving ----------------------------------------------------------
    def begin(self) -> None:
        """Take the batch's compute job off the server and arm the end timer."""
        fluid, env = self.fluid, self.chain.rt.env
        c, d = self.c0, self.d
        for at in sorted((self.c0_index, self.d_index), reverse=True):
            if at >= 0:
                del fluid.jobs[at]
        if c is not None:
            fluid.kinds["compute"] -= 1
            c.token += 1  # its live timer goes stale
            c.timer_at = math.inf
        if d is not None:
            fluid.kinds["d2h"] -= 1
            d.token += 1  # (materialise arms it again)
            d.timer_at = math.inf
        fluid.folded = self  # every entry materialises it first (sim.fluid)
        st_landed = self.chain.st.landed
        assert st_landed is not None
        st_landed.fold = self  # the batch's compute arriving at its layers: an entry
        call_exactly(env, self.end, self._ended)
        self.chain.rt.fold_counts["chain_folded"] += 1

    def _ended(self, _ev: object) -> None:
        if self.fluid.folded is not self or self.chain.rt.env.now != self.end:
            return  # materialised earlier, or an end an absorbed change moved
        self.materialise(at_end=True)

    def absorb(self, job: FluidJob | None) -> bool:
        """An L3 transfer joining or leaving now (or a re-plan: ``job`` None) changes
        neither the kernel's nor the compute job's rate when the kernel's lone rate is
        the fold's (no PCIe fault came since) and host memory cannot bind, with the
        kernel or without, at any L3 split (:meth:`sim.link.PcieLink.l3_ceiling`);
        the compute's rates are constants. It splits their progress,
        though, as every change of the job set does: the server's jobs (all L3
        transfers) are charged at the transitions up to now, the state now (each of
        the fold's jobs charged up to now) is kept as a transition of its own, and the
        transitions after it are walked again from there (their floats may differ)."""
        if job is not None and job.kind != "l3":
            return False
        rt = self.chain.rt
        now = rt.env.now
        link = rt.link
        ceiling = link.l3_ceiling()
        if not now < self.end:
            return False
        beside = self.beside
        if beside is None:
            if (link.lone_rate("h2d", kernel=True) != self.k_rate
                    or link.host_binds(self.k_rate, ceiling) or link.host_binds(0, ceiling)):
                return False
        else:
            assert self.d is not None
            if (_beside(link, self.d) != beside or link.host_binds(beside.copies, ceiling)
                    or link.host_binds(beside.lone, ceiling)):
                return False
        times = self.times
        n = bisect.bisect_right(times, now)
        if n > self.charged:
            self.fluid.charge_folded(times[self.charged:n])
        state, last, nxt_k = self.last_check if n == len(times) else self._state(n)
        # (the fields of a state: _walk's doc) only the jobs' remaining work changes
        k_rem, c_rem, c_rate = state[:3]
        n_rows, k_active, c_active = state[4], state[7], state[8]
        dt = now - last
        d_rem, d_rate = state[18], state[19]
        if dt > 0:  # FluidServer._advance on the fold's jobs
            if k_active:
                k_rem -= self.k_rate * dt
            if c_active:
                c_rem -= c_rate * dt
            if beside is not None:
                d_rem -= d_rate * dt
        kept = ((k_rem, c_rem, *state[2:18], d_rem, *state[19:]), now, nxt_k)
        rows, checks, check_at = self.rows, self.checks, self.check_at
        # the old walk after now: the transitions after the kept state, once walked again
        # from it, are the old ones a transition later when a state kept on the way is
        # the old one (the splits' rounding left no trace: the kernel's times never
        # depend on them, the compute's only until the batch waits for a layer)
        i = bisect.bisect_right(check_at, n)
        old_times, old_rows = times[n:], rows[n_rows:]
        old_checks, old_at = checks[i:], check_at[i:]
        old_final, end = (self.final, self.final_c, self.final_d), self.end
        del times[n:], rows[n_rows:], checks[i:], check_at[i:]
        times.append(now)
        checks.append(kept)
        check_at.append(n + 1)
        self.charged = n + 1  # (the server charges its jobs up to now itself)
        self.final = self.final_c = self.final_d = False
        rt.fold_counts["chain_absorbed"] += 1
        if old_checks:  # walk up to the first old state kept, then compare at each
            j = self._walk(times, rows, old_at[0] - n, kept, planning=True, old=old_checks)
        else:
            j = self._walk(times, rows, CHECK, kept, planning=True)
        if isinstance(j, int):  # the old walk's from old state j on: splice it
            times += old_times[old_at[j] - n:]
            rows += old_rows[old_checks[j][0][4] - n_rows:]
            checks += old_checks[j + 1:]
            check_at += [m + 1 for m in old_at[j + 1:]]
            self.final, self.final_c, self.final_d = old_final  # (end, last_check: old)
            rt.fold_counts["chain_spliced"] += 1
        elif self.end != end:
            call_exactly(rt.env, self.end, self._ended)
        return True

    def holds(self) -> bool:
        """After an absorbed re-plan: no L3 transfer's deadline is near its finish at its
        new rate (try_fold's check: the watch the kernel's joins and leaves call would
        arm no timer)."""
        return _watch_quiet(self.fluid.jobs)

    def materialise(self, at_end: bool = False) -> None:
        """The unfolded state after the transitions up to now (module doc); at the end
        with the last kernel landing now, that landing runs here (its real finish)."""
        fluid, chain, cc = self.fluid, self.chain, self.cc
        rt, st = chain.rt, chain.st
        env = rt.env
        now = env.now
        fluid.folded = None
        landed = st.landed
        assert landed is not None
        landed.fold = None
        if not at_end:
            rt.fold_counts["chain_interrupted"] += 1
        # the L3 jobs: charged up to the last applied change, as the server would have
        times = self.times
        n = bisect.bisect_right(times, now)
        fluid.charge_folded(times[self.charged:n])  # (those before: charged by absorb)
        overhead = rt.copies.overhead
        groups = st.load_groups
        # the chain's side effects of the transitions up to now: their rows, counts and
        # the state the last of them left
        k_rem = 0.0
        if n:
            (k_rem, c_rem, c_rate, c_due, n_rows, n_launch, moved, k_active, c_active,
             c_fresh, k_first, chain.g, landed.count, chain.t0, k_launch, layer, cc_t0,
             cc_start, d_rem, d_rate, d_due
             ) = (self.last_check if n == len(times) else self._state(n))[0]
            chain.start_t = k_launch
            if n_rows:
                rt.timeline.record_rows(self.rows[:n_rows])
            if n_launch:
                rt.fold_counts["chain_groups"] += n_launch
            if moved:  # a landing: a group with bytes follows it (plan)
                rt.link.moved["h2d"] += moved
                fluid.promise(chain.t0 + overhead, 1.0 - rt.link.slowdown)
            if k_active:
                fluid.kept()  # the last launch joined (after the last landing)
            if cc is not None:
                cc.layer, cc.t0, cc.start_t = layer, cc_t0, cc_start
        else:
            k_active = k_first = False
            c_fresh = self.c0 is None
            c_active = not c_fresh
            k_launch = 0.0
            if self.c0 is not None:
                c0 = self.c0
                c_rem, c_rate, c_due = c0.remaining, c0.rate, c0.due
            if self.d is not None:
                d_rem, d_rate, d_due = self.d.remaining, self.d.rate, self.d.due
        # the jobs in flight, with the remaining their last change left them
        k = c = final_k = final_c = None
        if k_active:
            group = groups[chain.g]
            k = FluidJob(group.nbytes, "h2d", None, _KERNEL)
            k.then = chain._moved
            k.rate = self.k_rate
            k.due = k_launch + k.work / self.k_rate  # as its join computed it
            k.remaining = k_rem
            if at_end and self.final:
                final_k = k
        if c_active:
            if c_fresh:
                assert cc is not None
                c = FluidJob(cc.times[cc.layer], "compute", thread="compute")
                c.then = cc._layer_done
            else:
                assert self.c0 is not None
                c = self.c0
            c.remaining, c.rate, c.due = c_rem, c_rate, c_due
            if cc is not None:
                landed.waiter = None
            elif at_end and self.final_c:
                final_c = c
        elif cc is not None:
            landed.at, landed.waiter = cc.layer, cc._layer_start
        d = self.d
        final_d = None
        if d is not None:
            d.remaining, d.rate, d.due = d_rem, d_rate, d_due
            if at_end and self.final_d:
                final_d = d
        # back on the server in the order they joined it: the jobs there before the
        # fold at their places (list.insert past the end appends), then the fold's own
        back = [] if c is None or c_fresh else [(self.c0_index, c)]
        if d is not None:
            d_at = self.d_index
            if self.c0 is not None and not back and self.c0_index < d_at:
                d_at -= 1  # c0, before it, left
            back.append((d_at, d))
            back.sort(key=_first)
            fluid.kinds["d2h"] = fluid.kinds.get("d2h", 0) + 1
        for at, job in back:
            fluid.jobs.insert(at, job)
        if k is not None and k_first:
            fluid._add(k)
        if c is not None:
            if c_fresh:
                fluid.jobs.append(c)
            fluid.kinds["compute"] = fluid.kinds.get("compute", 0) + 1
        if k is not None and not k_first:
            fluid._add(k)
        # their live timers (and the pending launch's)
        if k is not None:
            if final_k is None:
                fluid._arm(k, k.due)
        else:
            launch_at = chain.t0 + overhead  # the landing (or the fold's step) + overhead
            call_exactly(env, launch_at, chain._launched)
        if c is not None and final_c is None:
            if final_k is not None and c.rate != self.free:
                c.token += 1  # the landing re-plans it now
                c.timer_at = math.inf
            else:
                fluid._arm(c, c.due)
        if d is not None and final_d is None:
            fluid._arm(d, d.due)
        if final_k is not None:
            fluid._finish(final_k)
        elif final_c is not None:
            fluid._finish(final_c)
        elif final_d is not None:
            fluid._finish(final_d)


def _same(a: tuple, b: tuple) -> bool:
    """Two kept states (:meth:`ChainFold._walk`) equal bit for bit: equal, with the
    jobs' remaining work (the only fields a split can leave at zero) of one sign."""
    if a != b:
        return False
    sa, sb = a[0], b[0]
    return (math.copysign(1.0, sa[0]) == math.copysign(1.0, sb[0])
            and math.copysign(1.0, sa[1]) == math.copysign(1.0, sb[1]))


def _watch_quiet(jobs: list) -> bool:
    """No L3 job of ``jobs`` (L3 transfers) can have sim.l3_client.watch arm its
    deadline timer while its rate holds: each is armed already, or finishes clearly
    before its deadline."""
    for j in jobs:
        if not j.armed and not (j.rate > 0 and j.due + _WATCH_MARGIN * (1.0 + abs(j.due))
                                <= j.deadline):
            return False
    return True


def _all_timed(times: tuple[float, ...], first: int) -> bool:
    """Every layer from ``first`` on takes time (``t > 0``, as ``0.0 < t``: NaN does not),
    checked in C, not a loop of Python comparisons per layer."""
    return all(map(_ZERO.__lt__, times[first:]))


def try_fold(chain: LoadChain) -> bool:
    """Fold ``chain`` from its present step (group ``chain.g``, with bytes, about to
    launch) when the conditions of the module doc hold; False: it runs unfolded."""
    rt = chain.rt
    fluid = rt.fluid
    rt.fold_counts["chain_tried"] += 1
    if fluid.folded is not None:  # a folded compute tail (sim.tail_fold): an entry
        fluid.folded.materialise()
    if not rt.layerwise or not fluid.fold_possible("h2d", "compute", copies=True):
        return False
    kinds = fluid.kinds
    if kinds.get("h2d", 0):
        return False
    link = rt.link
    copy = beside = None
    if kinds.get("d2h", 0):
        copy = _copy_beside(fluid) if BESIDE_COPY else None
        if copy is None or not fluid.fold_possible("d2h"):
            return False
        beside = _beside(link, copy)
        if copy.rate != beside.lone:
            return False  # squeezed now (host memory): allocate's rates may differ
    found = _compute_slot(chain, fluid)
    if found is None:
        return False
    cc, job = found
    slow = 1.0 - link.slowdown
    if not slow > 0:
        return False
    # the rate shift_rate gives its kernels (allocate's beside the copy)
    rate = link.lone_rate("h2d", kernel=True) if beside is None else beside.both_k
    if not rate > 0:
        return False
    moving = kinds.get("l3", 0)
    l3_total = 0.0
    if moving:
        steady = link.steady_l3(moving)
        if steady is None:
            return False
        l3_jobs, l3_total = steady
        if not _watch_quiet(l3_jobs):
            return False  # watch might arm its deadline timer at one of the changes
    if beside is None:
        if link.host_binds(rate, l3_total) or link.host_binds(0, l3_total):
            return False  # host memory binds, with a kernel on the link or without
    elif link.host_binds(beside.copies, l3_total) or link.host_binds(beside.lone, l3_total):
        return False  # (the same beside the copy)
    if cc is not None and not _all_timed(cc.times, cc.layer):
        return False
    fold = ChainFold(chain, cc, job, copy)
    if not fold.plan(rate, slow, beside):
        return False
    fold.begin()
    if copy is not None:
        rt.fold_counts["chain_beside_copy"] += 1
    return True


class Beside(NamedTuple):
    """A d2h copy kernel's rates beside the chain (:meth:`sim.link.PcieLink.allocate`'s
    floats): alone on the link (``lone``), with an h2d kernel (``both``; the kernel's:
    ``both_k``) when the bidirectional cap scales them, and the two directions' total
    then (``copies``, what host memory sees); ``lone_k``: an h2d kernel's rate alone."""

    lone: float
    both: float
    copies: float
    lone_k: float
    both_k: float


def _beside(link: PcieLink, copy: FluidJob) -> Beside:
    """``copy``'s rates beside the chain's kernels, as allocate sets them: each
    direction's share over one job (``lone_rate``), their sum, scaled to the
    bidirectional cap when it exceeds it (``job.rate *= scale``)."""
    lone_k = link.lone_rate("h2d", kernel=True)
    lone = link.lone_rate("d2h", "kernel" in copy.tags, copy.cap)
    total = lone_k + lone  # (allocate: total_h2d + total_d2h, each 0 + its one rate)
    bidirectional = link.bidirectional * link.factor
    if total > bidirectional:
        scale = bidirectional / total
        if scale < 1.0:
            return Beside(lone, lone * scale, total * scale, lone_k, lone_k * scale)
    return Beside(lone, lone, total * 1.0, lone_k, lone_k)


def _copy_beside(fluid: FluidServer) -> FluidJob | None:
    """The one d2h job on the server when it is a copy kernel (a backup's, holding SMs:
    every compute job runs slowed while it lasts) at its lone rate (no h2d job, no
    host-memory squeeze) that is not due now; None otherwise."""
    if fluid.kinds.get("d2h", 0) != 1:
        return None
    for job in fluid.jobs:
        if job.kind == "d2h":
            if "kernel" not in job.tags or not job.rate > 0:
                return None
            return job
    return None


def _first(pair: tuple) -> object:
    return pair[0]


_KERNEL = frozenset({"kernel"})
_ZERO = 0.0
