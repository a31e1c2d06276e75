"""One replica's way to the L3 store: its NIC, and its calls guarded as the torch runtime
guards them (:mod:`hicache.tiers.l3_guard`: deadline, bounded retry, cooldown after
failure), in simulated time.

    exists(keys) / get(keys, bytes) / put(keys, bytes per key)      one store operation
      └ guard: skip while down | attempts: [latency][transfer on this replica's fluid
        server: NIC share, store share, host memory (sim.link)] within the deadline

(``leading_hits(keys)`` is exists answered as the count of leading hits, as a prefetch
reads it.) While the store is up for this client and no fault is on its way (``_clear``:
the common case) an operation makes its first attempt inline, without the guard's
generators; one that fails hands over to the guard where it would be, so answers,
times, counters, blame and rows are the guard's (tests/sim/test_l3_fast_path.py).

An attempt ends ``ok``, ``error`` (the store refuses: it is down, or no node is left for a
write) or ``timeout`` (no answer before ``policy.deadline(bytes)``: the store hangs, the
NIC is lost, or the transfer is too slow; the transfer is abandoned). An operation whose
attempts all fail is answered as misses (exists, get) or nothing written (put), never an
error of the run; the counters are the torch runtime's (``l3_errors``, ``l3_timeouts``,
``l3_retries``, ``l3_skipped``, ``l3_reconnects``).

Transfer rates (set by :meth:`allocate`, called from this replica's link allocation):
each group's jobs (Mooncake: reads and writes together) split
``min(NIC x nic_factor, the store's share for this replica)`` equally; the host-memory
coupling with PCIe traffic is applied afterwards by :class:`sim.link.PcieLink`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import simpy
from simpy.events import PENDING

from hicache.runtime.interface import L3Key
from hicache.tiers.l3_guard import COUNTERS, L3Health, RetryPolicy
from sim.fluid import FluidJob, FluidServer
from sim.l3 import L3Store, NoLiveNode
from sim.streams import fire, pending, timer

if TYPE_CHECKING:
    from hicache.timeline import Timeline
    from sim.faults import FaultLedger

Proc = Generator[simpy.Event, Any, Any]
Trace = list[int | None] | None  # the faults blamed for an operation's failed attempts
OK, ERROR, TIMEOUT = "ok", "error", "timeout"


class L3Client:
    def __init__(self, env: simpy.Environment, store: L3Store, fluid: FluidServer,
                 timeline: Timeline, *, policy: RetryPolicy | None = None) -> None:
        self.env, self.store, self.fluid, self.timeline = env, store, fluid, timeline
        self.policy = policy or RetryPolicy()
        self.health = L3Health(self.policy)
        self.counts = dict.fromkeys(COUNTERS, 0)
        # fault index -> NIC rate factor; changed through :meth:`nic_fault` (the epoch)
        self.nic_faults: dict[int, float] = {}
        self.host_faults: list[int] = []  # host_pressure faults on this replica (blame)
        self.ledger: FaultLedger | None = None  # set by sim.faults when faults are injected
        self.blame: int | None = None  # the fault behind the last failed operation
        self._moving = False  # an L3 job under way (counted in the store's movers)
        store.clients.append(self)
        store.bump()
        # who is moving (the store's share) changes with this replica's L3 jobs
        fluid.listen("l3", self._jobs_changed)

    def _jobs_changed(self) -> None:
        """An L3 job joined or left this replica's fluid server (its listener): the
        store's epoch moves, and its count of moving clients follows :meth:`moving`."""
        store = self.store
        store.bump()
        moving = self.fluid.kinds.get("l3", 0) > 0
        if moving is not self._moving:
            self._moving = moving
            store.movers += 1 if moving else -1

    # ---- rates ---------------------------------------------------------------------
    @property
    def nic_factor(self) -> float:
        return math.prod(self.nic_faults.values())

    def nic_fault(self, fault: int, factor: float, on: bool) -> None:
        """Fault ``fault`` scales this replica's NIC by ``factor`` (or ends)."""
        if on:
            self.nic_faults[fault] = factor
        else:
            del self.nic_faults[fault]
        self.store.bump()

    def moving(self, group: str) -> bool:
        """Whether this replica has an L3 transfer in ``group`` under way."""
        if self.store.duplex_shared:  # one group: any L3 job (all are this client's)
            return self.fluid.kinds.get("l3", 0) > 0
        return any(isinstance(j, L3Job) and self.store.group(j.direction) == group
                   for j in self.fluid.jobs)

    def allocate(self, jobs: list[L3Job]) -> None:
        """Set the rates of this replica's L3 jobs (module doc)."""
        store = self.store
        if store.duplex_shared:  # one group, no need to sort the jobs into groups
            self._split("io", jobs)
            return
        groups: dict[str, list[L3Job]] = {}
        for job in jobs:
            groups.setdefault(store.group(job.direction), []).append(job)
        for group, members in groups.items():
            self._split(group, members)

    def _split(self, group: str, members: list[L3Job]) -> None:
        """``group``'s budget split equally among ``members`` (each within its cap)."""
        store = self.store
        budget = store.share(group)
        nic = store.nic
        if nic is not None:  # (no NIC fault: nic_factor is 1, nic * 1 == nic)
            budget = min(budget, nic * self.nic_factor if self.nic_faults else nic)
        each = budget / len(members)
        for job in members:
            job.rate = each if job.cap is None else min(each, job.cap)

    def watch(self, jobs: list[L3Job]) -> None:
        """After the final rates are set: a job that cannot finish by its deadline at its
        rate gets a timer that expires it there. Healthy transfers arm none, so no timer
        outlives the run."""
        now = self.env._now
        for job in jobs:
            if job.armed or (job.rate > 0 and now + job.remaining / job.rate <= job.deadline):
                continue
            job.armed = True
            alarm = self.env.timeout(max(0.0, job.deadline - now))
            alarm.callbacks.append(lambda _ev, j=job: self._expire(j))

    def _expire(self, job: L3Job) -> None:
        """``job``'s deadline passed with it still running: fire its ``expired``. A
        transfer makes none (:meth:`_transfer`): it is made here, with the transfer's
        wake-up as its callback while the transfer waits, which is what the event made
        with the job would hold now (the wake-up appended when the wait began, removed
        when it ended); an event is not scheduled until it fires, so the order of every
        event is the same."""
        if job.expired is None:
            job.expired = self.env.event()
            if job.waiting:
                job.expired.callbacks.append(job.woken)  # type: ignore[union-attr]
        job.expire()

    def replan(self) -> None:
        self.fluid.replan()

    # ---- operations ------------------------------------------------------------------
    def _clear(self) -> bool:
        """The common case: the store is up for this client (no cooldown) and no fault is
        on its way (so an attempt starting now blames none: :meth:`_culprit`). An
        operation then makes its first attempt outside the guard (a get or put runs its
        attempt's body, :meth:`_read` / :meth:`_write`, an exists RPC inlines
        :meth:`_rpc`'s healthy branch); if that attempt fails the guard goes on from there
        (:meth:`_guarded`'s ``failed``), so counters, blame, rows and times are the
        guard's."""
        st = self.store
        return (self.health.down_until is None
                and not (st.refusing or st.hanging or self.nic_faults or self.host_faults))

    def exists(self, keys: Sequence[L3Key], trace: Trace = None) -> Proc:
        """Which of ``keys`` the store holds (a master RPC); all False when it fails.
        ``trace`` (a list) collects the fault blamed for each failed or skipped attempt."""
        out = yield from self._query(keys, self.store.contains_each, trace)
        return [False] * len(keys) if out is None else out

    def leading_hits(self, keys: Sequence[L3Key], trace: Trace = None) -> Proc:
        """:meth:`exists`, answered as how many of ``keys`` from the first the store holds
        (what a prefetch reads of the answer: it stops at the first miss); 0 when it
        fails. The same call, times and counters as :meth:`exists`."""
        return self._query(keys, self.store.count_hits, trace, 0)

    def _query(self, keys: Sequence[L3Key], answer: Callable[[Sequence[L3Key]], Any],
               trace: Trace = None, fallback: Any = None) -> Proc:
        """One guarded master RPC about ``keys``: ``answer(keys)`` read from the store
        when it answers, ``fallback`` when the operation failed (module doc)."""
        failed = None
        if self._clear():  # the first attempt inline (_clear): _rpc's healthy branch
            st = self.store
            t0 = self.env._now
            yield timer(self.env, st.query_latency_s)
            outcome = ERROR if st.refusing else OK
            if self._ok(outcome):
                return answer(keys)
            failed = (t0, outcome)
        # (the guard's attempts as partials, not closures: no cells made on the way here)
        out = yield from self._guarded("exists", 0, partial(self._ask, keys, answer), trace,
                                       failed)
        return fallback if out is None else out

    def _ask(self, keys: Sequence[L3Key], answer: Callable[[Sequence[L3Key]], Any]) -> Proc:
        """One attempt of :meth:`_query` (the guard's): the RPC, then ``answer(keys)``."""
        outcome = yield from self._rpc()
        return outcome, answer(keys)

    def get(self, keys: Sequence[L3Key], bytes_per_key: int, trace: Trace = None,
            held: int | None = None) -> Proc:
        """Fetch ``keys`` into host memory; returns how many leading keys arrived (a key
        lost meanwhile, or a failed operation, ends the prefix). ``held``: a store
        ``version`` since which every key was found present (a prefetch's query hits;
        None: not known), so while none of them left the store they all still are."""
        nbytes = len(keys) * bytes_per_key
        failed = None
        if self._clear():  # the first attempt unguarded (_clear): _read's body inline
            t0 = self.env._now
            outcome = yield from self._transfer("read", nbytes)
            got = self._got(keys, bytes_per_key, outcome, held)
            if self._ok(outcome):
                return got
            failed = (t0, outcome)
        got = yield from self._guarded(
            "get", nbytes, partial(self._read, keys, bytes_per_key, nbytes, held), trace,
            failed)
        return got or 0

    def _read(self, keys: Sequence[L3Key], bytes_per_key: int, nbytes: int,
              held: int | None) -> Proc:
        """One attempt of :meth:`get` (the guard's): the transfer, then what arrived."""
        outcome = yield from self._transfer("read", nbytes)
        return outcome, self._got(keys, bytes_per_key, outcome, held)

    def _got(self, keys: Sequence[L3Key], bytes_per_key: int, outcome: str,
             held: int | None = None) -> int:
        """What a read attempt that ended ``outcome`` delivered: the leading keys still
        held (none unless ``ok``; all of them, not asked again, while none of them left
        the store since ``held``: :meth:`get`, :meth:`sim.l3.L3Store.held`), their LRU
        order refreshed and their bytes counted."""
        store = self.store
        if outcome != OK:
            got = 0
        elif held is not None and store.held(keys, held):
            got = len(keys)
        else:
            got = store.count_hits(keys)
        store.touch(keys[:got], checked=True)  # (count_hits' prefix, or held since)
        store.bytes_read += got * bytes_per_key
        return got

    def put(self, keys: Sequence[L3Key], bytes_per_key: int) -> Proc:
        """Write the keys the store lacks (an exists RPC, then the transfer); returns how
        many were written (0 when the operation failed)."""
        answer = yield from self._query(keys, self.store.missing_marked)  # an exists RPC
        # no answer: every key counts as missing (none known absent: no mark)
        todo, mark = (list(keys), None) if answer is None else answer
        if not todo:
            return 0
        nbytes = len(todo) * bytes_per_key
        failed = None
        if self._clear():  # the first attempt unguarded (_clear): _write's body inline
            t0 = self.env._now
            outcome = yield from self._transfer("write", nbytes)
            outcome, written = self._wrote(todo, bytes_per_key, outcome, mark)
            if self._ok(outcome):
                return written
            failed = (t0, outcome)
        written = yield from self._guarded(
            "put", nbytes, partial(self._write, todo, bytes_per_key, nbytes, mark), None,
            failed)
        if written is None and self.ledger is not None and self.blame is not None:
            self.ledger.count(self.blame, "store_pages_failed", len(todo))
        return written or 0

    def _write(self, todo: Sequence[L3Key], bytes_per_key: int, nbytes: int, mark: int | None
               ) -> Proc:
        """One attempt of :meth:`put` (the guard's): the transfer, then the insert."""
        outcome = yield from self._transfer("write", nbytes)
        return self._wrote(todo, bytes_per_key, outcome, mark)

    def _wrote(self, todo: Sequence[L3Key], bytes_per_key: int, outcome: str,
               mark: int | None = None) -> tuple[str, int]:
        """A write attempt that moved its bytes (``outcome`` ok) inserts ``todo`` (all
        absent at the store's version ``mark``, None: not known); an error when no node
        is left to take them."""
        if outcome != OK:
            return outcome, 0
        try:
            return OK, self.store.insert(todo, bytes_per_key, mark)
        except NoLiveNode:
            return ERROR, 0

    # ---- the guard ---------------------------------------------------------------------
    def _guarded(self, op: str, nbytes: int, attempt: Callable[[], Proc],
                 trace: Trace = None, failed: tuple[float, str] | None = None) -> Proc:
        """Run ``attempt`` under the policy; its value, or None when the operation failed
        or was skipped (counted, and blamed on the fault behind it). ``failed``: the
        operation's first attempt, made inline while :meth:`_clear` (admitted as a call,
        no culprit when it started), failed (its start and outcome): go on from there."""
        if failed is None:
            admission = self.health.admit(self.env._now)
            if admission == "skip":
                self._count("l3_skipped", self.blame)
                if trace is not None:
                    trace.append(self.blame)
                return None
            first = 0
            attempts = self.policy.attempts(admission == "probe")
        else:
            first = 1
            attempts = self.policy.attempts(False)
            self._failed(op, failed[0], None, failed[1], trace)
        for k in range(first, attempts):
            if k:
                self._count("l3_retries")
                yield self.env.timeout(self.policy.backoff(k - 1))
            t0, cause = self.env._now, self._culprit()
            outcome, value = yield from attempt()
            if self._ok(outcome):
                return value
            self._failed(op, t0, cause, outcome, trace)
        self._count("l3_errors", self.blame)
        self.health.failed(self.env._now)
        return None

    def _ok(self, outcome: str) -> bool:
        """Whether an attempt that ended ``outcome`` succeeded; a success after the store
        was marked down counts a reconnect."""
        if outcome != OK:
            return False
        if self.health.answered():
            self._count("l3_reconnects")
        return True

    def _failed(self, op: str, t0: float, cause: int | None, outcome: str,
                trace: Trace) -> None:
        """An attempt begun at ``t0`` (the fault active then: ``cause``) failed now with
        ``outcome``: blame, trace, timeline row, timeout count."""
        self.blame = cause if cause is not None else self._culprit()
        if trace is not None:
            trace.append(self.blame)
        self.timeline.record("l3", f"{op}_{outcome}", t0, self.env._now, nbytes=0)
        if outcome == TIMEOUT:
            self._count("l3_timeouts", self.blame)

    def _rpc(self) -> Proc:
        """One master round trip: ``ok``, ``error`` (refused) or ``timeout``."""
        st = self.store
        if st.refusing:
            yield self.env.timeout(st.query_latency_s)
            return ERROR
        if st.hanging or self.nic_factor == 0:
            yield self.env.timeout(self.policy.deadline(0))
            return TIMEOUT
        yield self.env.timeout(st.query_latency_s)
        return ERROR if st.refusing else OK

    def _transfer(self, direction: str, nbytes: int) -> Proc:
        """Latency, then ``nbytes`` on this replica's fluid server, within the deadline.
        It waits on one event (``job.wake``) that the store going down or the deadline
        triggers as an ``any_of`` of them would, and the finish in its own event
        (``then_submit``): one SimPy event fewer per transfer than an ``any_of`` over the
        job's ``done``, same times; the caller goes on one event earlier after a finish,
        which only changes the order among events at exactly that time
        (``benchmarks/sim_fingerprint.py`` checks that every result stays the same)."""
        st, env = self.store, self.env
        if st.refusing:
            yield env.timeout(st.latency_s)
            return ERROR
        job = L3Job(nbytes, direction, env._now + self.policy.deadline(nbytes))
        yield timer(env, st.latency_s)
        # (:meth:`moving`, inline for one group: any L3 job of this client's)
        fluid, group = self.fluid, None if st.duplex_shared else direction
        was_moving = (fluid.kinds.get("l3", 0) > 0 if group is None
                      else self.moving(st.group(direction)))
        job.wake = wake = pending(env)
        fluid.then_submit(job, job.arrived)
        if not was_moving:
            st.changed(self)
        # wait for the first of: the bytes moved, the store going down, the deadline
        # (an any_of's wake-ups, less its own event after the finish: job.arrived); the
        # deadline's event is made only if it fires (:meth:`_expire`)
        down, woken = st.went_down, job.woken
        if down.callbacks is None:
            woken(down)  # processed already: the any_of would trigger at once
        else:
            down.callbacks.append(woken)
        job.waiting = True
        yield wake
        job.waiting = False
        for event in (down, job.expired):
            if event is not None and event.callbacks and woken in event.callbacks:
                event.callbacks.remove(woken)
        if not job.moved:
            fluid.cancel(job)
        job.then = None  # (called or cancelled): the job and its bound ``arrived`` no
        # longer hold each other, so refcounting frees the job, not the collector
        if not (fluid.kinds.get("l3", 0) > 0 if group is None
                else self.moving(st.group(direction))):
            st.changed(self)
        if st.refusing:
            return ERROR
        return OK if job.moved else TIMEOUT

    def _culprit(self) -> int | None:
        """The fault active now that would fail a call: the store's, then this replica's
        (an attempt blames the one active when it started, else when it failed)."""
        st = self.store
        if not (st.refusing or st.hanging or self.nic_faults or self.host_faults):
            return None  # no fault on the way (the common case)
        active = self.on_path()
        return active[0] if active else None

    def on_path(self) -> list[int]:
        """Faults active now on this replica's way to L3, most disruptive first: the
        store refusing or hanging, then its NIC, then its host memory."""
        st = self.store
        return [*reversed(st.refusing), *reversed(st.hanging), *reversed(self.nic_faults),
                *reversed(self.host_faults)]

    def _count(self, counter: str, blame: int | None = None) -> None:
        self.counts[counter] += 1
        if blame is not None and self.ledger is not None:
            self.ledger.count(blame, counter)


class L3Job(FluidJob):
    """A transfer between this replica's host memory and the store (kind ``l3``), due by
    ``deadline``; ``expired`` fires if it is still running then (:meth:`L3Client.watch`;
    None: made when it fires, :meth:`L3Client._expire`)."""

    __slots__ = ("direction", "deadline", "expired", "armed", "wake", "moved", "waiting")

    def __init__(self, nbytes: float, direction: str, deadline: float,
                 expired: simpy.Event | None = None) -> None:
        super().__init__(nbytes, "l3")
        self.direction, self.deadline, self.expired = direction, deadline, expired
        self.armed = False
        self.wake: simpy.Event | None = None  # what the transfer waits on (_transfer)
        self.moved = False  # all its bytes moved (the fluid finish)
        self.waiting = False  # the transfer waits on ``wake`` (_transfer)

    def expire(self) -> None:
        assert self.expired is not None
        if not self.expired.triggered:
            self.expired.succeed()

    def arrived(self) -> None:
        """The fluid finish (``then``): its bytes moved; wake the transfer at once."""
        self.moved = True
        self.woken(None)

    def woken(self, _ev: object) -> None:
        """Wake the transfer waiting on :attr:`wake` (the first call does)."""
        wake = self.wake
        if wake is not None and wake._value is PENDING:  # (not ``triggered``)
            fire(wake.env, wake)
