"""Fluid sharing: jobs progress at rates an allocation function assigns to the active set.

Invariant: between two changes of the active set every job's rate is constant, so each
job's ``remaining`` work is exact at every change (remaining -= rate * dt). When a job
joins or leaves, all rates are recomputed and only jobs whose rate changed get a new
finish time. Work is in arbitrary units (bytes for links, seconds-at-full-speed for
compute). No process per job: a finish is a timer guarded by a token, so a re-planned
(or cancelled) job's stale timer does nothing; a timer is a slotted :class:`_Timer`
holding its job and token, queued where ``env.timeout`` would be
(:func:`sim.streams.queue_at`), with no Event, callback list or partial per timer. A
compute job slowed by a copy kernel keeps its timer (it fires early and re-arms for the
exact finish) instead of leaving one stale timer per rate change. A job of another kind
(PCIe, L3) re-planned to finish no earlier than its live timer fires keeps it too
(``KEEP``), but the re-plan takes the queue entry's id a new timer would have taken, and
the kept timer, when it fires, moves to that very entry (time and id): every event keeps
its place (equal jobs sharing a link finish in the order they were re-planned), and an
L3 job slowed by several joins at one instant, or slowed and sped up again, leaves one
timer, not a stale one per re-plan. Finishes are bit-identical either way; a kept compute
timer only changes the order among events at exactly the same time, which
``benchmarks/sim_fingerprint.py`` checks stays the same.

Re-allocating costs what changed: a compute job joining or leaving changes no other
rate (``solo``); a copy kernel joining or leaving a PCIe link it has alone changes only
its own rate and the compute jobs' (``shift``, :meth:`sim.link.PcieLink.shift_rate`).
Either sets the rates a re-allocation would set, and :meth:`FluidServer._shifted`
re-plans the jobs whose rate changed in the order :meth:`FluidServer._replan` does, so
finishes, timers and events are those of a re-allocation (tests/sim/test_fluid_shift).

Compute timers are planned ahead (``PLAN_AHEAD``), so a layer that a copy kernel slows
and then releases needs one timer, not one it re-arms or leaves stale:
- a compute job at a rate a promised join will change (:meth:`FluidServer.promise`: the
  load chain's next copy kernel, launched a known overhead after the last one landed)
  and that cannot finish before that join gets no timer: the join re-plans it;
- otherwise its timer is set where it would finish if every other job left at its
  present due and none joined, its remaining work split at each of those changes as
  :meth:`FluidServer._advance` splits it (:meth:`FluidServer._settled`), never later
  than its due at its present rate.
Invariant: a compute job's live timer fires no later than its due, or a change of its
rate (which re-plans it) comes first. A prediction that turns out wrong costs a re-arm
(the timer fired early) or a stale timer (its rate changed, a new timer), never a late
finish: every finish is at the due its last re-plan computed, as without planning.

A load chain folded by :mod:`sim.chain_fold` (or a compute tail, :mod:`sim.tail_fold`)
keeps its kernel and compute jobs off :attr:`FluidServer.jobs` (``folded``); every entry
from outside (:meth:`FluidServer._start`, ``_finish``, :meth:`~FluidServer.replan`,
``cancel``, ``adopt``, ``expect``) first materialises it, so each of them sees the jobs
the unfolded run has, with its floats; except a job joining or leaving that the fold
absorbs (:meth:`Folded.absorb`: an L3 transfer that changes none of its rates), after
which the server re-plans its own jobs as the unfolded run re-plans them (the folded
ones keep their rates: no re-plan) and asks the fold whether it still holds. The fold
modules ask :meth:`FluidServer.fold_possible`, charge the other jobs with
:meth:`FluidServer.charge_folded` and put their jobs back with the server's own ``_add``,
``_arm`` and ``_finish`` (friends, not users).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Generator
from heapq import heappush
from operator import attrgetter
from typing import Any, Protocol

import simpy
from simpy.events import NORMAL

from sim.streams import queue_at, queue_time

_NO_TAGS: frozenset[str] = frozenset()


class FluidJob:
    """One unit of work on a :class:`FluidServer`. ``kind`` and ``cap`` steer allocation;
    ``gil`` (the share of it that needs the interpreter lock, 0: none) and ``thread`` (the
    lane whose thread runs it) steer :mod:`sim.interpreter`."""

    __slots__ = ("work", "remaining", "rate", "kind", "cap", "tags", "done", "token", "gil",
                 "thread", "then", "due", "timer_at", "live", "key", "eid")

    def __init__(self, work: float, kind: str, cap: float | None = None,
                 tags: frozenset[str] = _NO_TAGS, gil: float = 0.0,
                 thread: str = "") -> None:
        if work < 0:
            raise ValueError(f"negative work {work}")
        self.work = self.remaining = float(work)
        self.rate = 0.0
        self.kind, self.cap, self.tags = kind, cap, tags
        self.gil = 0.0 if gil == 0.0 else min(1.0, max(0.0, gil))  # clamped to [0, 1]
        self.thread = thread
        self.done: simpy.Event | None = None
        self.then: Callable[[], None] | None = None  # called at the finish (then_submit)
        self.token = 0
        self.due = self.timer_at = math.inf  # when it finishes; when its live timer fires
        # the live timer's time in the queue; the entry it moves to when it fires (kept
        # by a re-plan, :meth:`FluidServer._schedule`): time and id (-1: none)
        self.live = self.key = math.inf
        self.eid = -1


_new_job = object.__new__


def compute_job(work: float, thread: str = "") -> FluidJob:
    """``FluidJob(work, "compute", thread=thread)`` without the class call (a compute
    chain's layers and samples: the commonest job): the same slots, set in line."""
    if work < 0:
        raise ValueError(f"negative work {work}")
    job = _new_job(FluidJob)
    job.work = job.remaining = float(work)
    job.rate, job.kind, job.cap, job.tags, job.gil = 0.0, "compute", None, _NO_TAGS, 0.0
    job.thread, job.done, job.then, job.token = thread, None, None, 0
    job.due = job.timer_at = job.live = job.key = math.inf
    job.eid = -1
    return job


class _Timer:
    """A job's timer in SimPy's queue (:func:`sim.streams.queue_at`): what
    ``Environment.step`` reads of an event (``callbacks``, set None when it is processed;
    ``_ok``), and the job and the token it was set under. Nothing else holds it."""

    __slots__ = ("callbacks", "_ok", "job", "token")


_new_timer = object.__new__


# Timers of compute jobs planned ahead (:meth:`FluidServer._schedule`); False: one at each
# finish its rate gives when it changes, as before (tests compare the two, bit for bit)
PLAN_AHEAD = True
# A job of another kind (PCIe, L3) re-planned to finish no earlier than its live timer
# fires keeps it; the timer, when it fires, moves to the very entry (time and id) a new
# timer would have got at the last re-plan (the id is taken then), so every event keeps
# its place; False: a new timer at each re-plan (tests compare the two, bit for bit)
KEEP = True
# A compute job at its rate alone is timed at its due without _settled (which could not
# time it earlier: SoloRate); False: _settled asks (tests compare the two, bit for bit)
ALONE = True
_due = attrgetter("due")
Allocator = Callable[[list[FluidJob]], None]
# (job, jobs) -> the rate of ``job`` when it joining or leaving ``jobs`` changes no other
# job's rate (a compute job on a PCIe link), else None: re-allocate them all. Whether it
# is None depends on the job's kind alone: the server remembers that per kind and asks
# only for a rate (a joining job of a kind that has one). Over any subset of ``jobs`` it
# is the job's rate over ``jobs`` or its rate alone (over none; fixed per kind: sim.link,
# a copy kernel among them or not), so a job at its rate alone keeps it whatever leaves
SoloRate = Callable[[FluidJob, list[FluidJob]], "float | None"]
# (job, jobs, kinds, joined) -> the rate every compute job runs at once ``job`` joined
# (it is in ``jobs``; the hook set its rate) or left ``jobs``, when that changes no other
# job's rate (a copy kernel alone on a PCIe link), else None: re-allocate them all.
# ``kinds`` counts ``jobs`` by kind (FluidServer.kinds)
ShiftRate = Callable[[FluidJob, list[FluidJob], dict[str, int], bool], "float | None"]


class Folded(Protocol):
    """A fold whose jobs are off the server (sim.chain_fold, sim.tail_fold)."""

    def materialise(self) -> None:
        """Put its jobs back as the unfolded run has them now; the fold is over."""

    def absorb(self, job: FluidJob | None) -> bool:
        """``job`` joins or leaves the server now (None: :meth:`FluidServer.replan`):
        True when that changes none of the fold's rates whatever the server's jobs are
        re-allocated (the fold then charged the server's jobs at its changes up to now
        and split its own jobs' progress there: the server re-plans its own jobs as the
        unfolded run does); False: materialise first."""

    def holds(self) -> bool:
        """After a re-plan :meth:`absorb` let in: whether the fold's changes still leave
        every other rate as it is (False: materialise)."""


class FluidServer:
    """Runs :class:`FluidJob` s concurrently; ``allocate(jobs)`` sets every job's rate.
    ``solo`` (optional) spares the re-allocation when a job joins or leaves without
    changing any other job's rate: the rates after it are those allocate would set.
    ``shift`` (optional, with ``solo``) spares it when a job joins or leaves changing
    only its own rate and the compute jobs' (one rate for all of them): the jobs whose
    rate changed are re-planned in the order a re-allocation re-plans them, so the
    rates, finishes and timers are those allocate gives."""

    def __init__(self, env: simpy.Environment, allocate: Allocator,
                 solo: SoloRate | None = None, shift: ShiftRate | None = None) -> None:
        self.env = env
        self.jobs: list[FluidJob] = []
        self.kinds: dict[str, int] = {}  # kind -> how many of ``jobs`` are of it
        # kind -> called whenever a job of that kind joins or leaves (:meth:`listen`)
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self._allocate = allocate
        self._solo = solo
        self._shift = shift if solo is not None else None
        self._last = env.now
        self._expected: list[float] = []  # changes a folded run skips (sim.fold), in order
        self._ei = 0  # the first of them not yet charged
        self._marks: list[float] | None = None  # change times while a fold records them
        # a job certainly joins at ``_promised`` that sets every compute job's rate to
        # ``_promised_rate`` (:meth:`promise`)
        self._promised, self._promised_rate = math.inf, 0.0
        # a folded load chain (sim.chain_fold) whose jobs are off the server: any entry
        # from outside first materialises it (puts them back where the unfolded run has
        # them), so every method below sees the unfolded state
        self.folded: Folded | None = None
        self._solo_kinds: dict[str, bool] = {}  # kind -> whether ``solo`` gives it a rate
        self._alone: dict[str, float | None] = {}  # kind -> ``solo``'s rate over no job
        self._ring = (self._fire,)  # every timer's callbacks

    def promise(self, at: float, rate: float) -> None:
        """A job will join at ``at`` (>= now) after which every compute job runs at
        ``rate`` (sim.load_chain: a copy kernel launched then); :meth:`kept` when it
        joined. A compute job whose rate that join changes and that cannot finish before
        it needs no timer until then: the join re-plans it."""
        self._promised, self._promised_rate = at, rate

    def kept(self) -> None:
        """The promised job joins now (or the promise is withdrawn)."""
        self._promised = math.inf

    def listen(self, kind: str, call: Callable[[], None]) -> None:
        """Call ``call()`` whenever a job of ``kind`` joins or leaves :attr:`jobs` (at
        once, before any re-allocation: sim.l3's epoch)."""
        self._listeners.setdefault(kind, []).append(call)

    def _add(self, job: FluidJob) -> None:
        """``job`` joins :attr:`jobs`; :attr:`kinds` counts it."""
        self.jobs.append(job)
        kind = job.kind
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if kind in self._listeners:
            for call in self._listeners[kind]:
                call()

    def _remove(self, job: FluidJob) -> None:
        self.jobs.remove(job)
        kind = job.kind
        self.kinds[kind] -= 1
        if kind in self._listeners:
            for call in self._listeners[kind]:
                call()

    def _advance(self) -> None:
        now = self.env._now  # type: ignore[attr-defined]
        if self._ei < len(self._expected):
            self._catch_up(now)
        dt = now - self._last
        if dt > 0:
            for job in self.jobs:
                job.remaining -= job.rate * dt
        self._last = now
        if self._marks is not None:
            self._marks.append(now)

    def _catch_up(self, upto: float) -> None:
        """Charge the jobs up to each expected change at or before ``upto``, as the
        unfolded run's own changes there would have (``remaining -= rate * dt`` per
        interval: the same floats)."""
        expected, i = self._expected, self._ei
        j = bisect.bisect_right(expected, upto, i)
        if j == i:
            return
        if self.jobs:
            last = self._last
            for at in expected[i:j]:
                dt = at - last
                if dt > 0:
                    for job in self.jobs:
                        job.remaining -= job.rate * dt
                last = at
        self._last = expected[j - 1]  # with no job to charge, only the clock moves
        if self._marks is not None:
            self._marks.extend(expected[i:j])
        self._ei = j

    def expect(self, times: list[float]) -> None:
        """A fold (sim.fold) skips compute jobs that would start and end at ``times``
        (ascending, all >= now): they change no other job's rate (a solo rate), but each
        start and end splits the others' progress; apply those splits as if they ran,
        and record this server's change times until :meth:`unexpect`."""
        if self.folded is not None:
            self.folded.materialise()
        self._expected, self._ei = times, 0
        self._marks = []

    def expect_more(self, times: list[float]) -> None:
        """A fold goes on past its last step (sim.fold chains a segment): ``times`` (all
        >= the changes still expected, >= now) follow those, which are charged as before.
        The change times recorded restart: :meth:`adopt` reads only those after a job's
        start, which is now or later."""
        self._expected, self._ei = self._expected[self._ei:] + times, 0
        self._marks = []

    def unexpect(self, t: float) -> list[float]:
        """The fold ended at ``t``: forget the expected changes after it; return the
        change times recorded since :meth:`expect` (what :meth:`adopt` needs)."""
        i = self._ei
        self._expected = self._expected[i:bisect.bisect_right(self._expected, t, i)]
        self._ei = 0
        marks, self._marks = self._marks or [], None
        return marks

    # -- folds that keep their jobs off the server (sim.chain_fold, sim.tail_fold) ------
    def fold_possible(self, *kinds: str, copies: bool = False) -> bool:
        """A fold may take jobs of ``kinds`` off the server now: none is folded, no decode
        fold's changes are expected (:meth:`expect`), compute jobs have a solo rate (and
        with ``copies`` a copy alone on its link a shift rate), and nothing listens to
        those kinds (a listener must see every join and leave)."""
        if not (self.folded is None and self._ei >= len(self._expected)
                and self._marks is None and self._solo is not None
                and (not copies or self._shift is not None)):
            return False
        listeners = self._listeners
        for kind in kinds:
            if kind in listeners:
                return False
        return True

    @property
    def last_change(self) -> float:
        """When the jobs were last charged (the last change of the job set)."""
        return self._last

    def charge_folded(self, changes: list[float]) -> None:
        """Charge the jobs on the server at a fold's change times up to now (``changes``,
        ascending), as its own jobs joining and leaving there would have: the splits
        :meth:`expect` makes for a decode fold (the same floats)."""
        self._expected, self._ei = changes, 0
        self._catch_up(self.env.now)
        self._expected, self._ei = [], 0

    def _replan(self, new: FluidJob | None = None) -> None:
        if not self.jobs:
            return
        before = [j.rate for j in self.jobs]
        self._allocate(self.jobs)
        for job, rate in zip(self.jobs, before, strict=True):
            if job is new or job.rate != rate:
                self._schedule(job)

    def _changed(self, job: FluidJob, joined: bool) -> None:
        """Re-plan after ``job`` (no solo rate) joined or left: :meth:`_shifted` when
        ``shift`` gives the compute jobs' rate, else a re-allocation."""
        shift = self._shift
        rate = shift(job, self.jobs, self.kinds, joined) if shift is not None else None
        new = job if joined else None
        if rate is None:
            self._replan(new=new)
        else:
            self._shifted(rate, new)

    def _shifted(self, rate: float, new: FluidJob | None = None) -> None:
        """:meth:`_replan` when ``shift`` said only the compute jobs' rate (now ``rate``)
        and ``new``'s (already set; ``new`` is the last of :attr:`jobs`) change: every
        rate is set before any job is re-planned, and they are re-planned in job order,
        as :meth:`_replan` does (a compute job's plan reads the others' dues)."""
        moved = ([j for j in self.jobs if j.kind == "compute" and j.rate != rate]
                 if self.kinds.get("compute") else ())
        for job in moved:
            job.rate = rate
        for job in moved:
            self._schedule(job)
        if new is not None:
            self._schedule(new)

    def _schedule(self, job: FluidJob) -> None:
        """Set the job's finish time from its rate. A compute job's live timer that fires
        no later is kept (it re-arms for the finish when it fires: :meth:`_fire`), so a
        layer slowed and sped up again by a copy kernel leaves no stale timer per change.
        Another kind's live timer that fires no later is kept too (``KEEP``): the entry
        a new timer would take now (time, the next id) is taken for it to move to when
        it fires (:meth:`_fire`), so the events keep the order of a new timer per
        re-plan (module doc)."""
        if job.rate <= 0:
            job.token += 1  # stalled until a later re-plan gives it a rate
            job.due = job.timer_at = math.inf
            return
        remaining = job.remaining
        delay = (remaining if remaining > 0.0 else 0.0) / job.rate  # max(0.0, remaining)
        now = self.env._now  # type: ignore[attr-defined]
        job.due = due = now + delay  # the time simpy gives a timeout(delay)
        if job.kind == "compute":
            if job.timer_at <= due or (PLAN_AHEAD and self._planned(job, now, due)):
                return
        elif KEEP and job.timer_at != math.inf:
            key = queue_time(now, due)  # where queue_at queues a timer at ``due`` now
            if job.live <= key:  # it fires first: when it does, it moves to this entry
                job.key, job.eid = key, next(self.env._eid)  # type: ignore[attr-defined]
                return
        self._arm(job, due)

    def _arm(self, job: FluidJob, at: float) -> None:
        """A new live timer for ``job`` firing at ``at`` (>= now); any earlier timer of
        the job goes stale (its token)."""
        job.token = token = job.token + 1
        job.timer_at = at
        self._timer(job, token, at)

    def _timer(self, job: FluidJob, token: int, at: float) -> None:
        """Queue a timer for ``job`` set under ``token``, firing at ``at`` (>= now) where
        ``env.timeout(exact_delay(now, at))`` would (:meth:`_fire`)."""
        timer = _new_timer(_Timer)
        timer.callbacks, timer._ok, timer.job, timer.token = self._ring, True, job, token
        job.live = queue_at(self.env, at, timer)
        job.eid = -1

    def _planned(self, job: FluidJob, now: float, due: float) -> bool:
        """Plan the timer of a compute job (due at ``due``, its live timer later) ahead:
        none while a promised join (:meth:`promise`) will re-plan it before ``due``; else
        one at :meth:`_settled` when that is earlier than ``due``. False: a timer at
        ``due``. Either way a timer fires no later than the job's due, or its rate
        changes first (module doc)."""
        if self._solo is None:
            return False
        if self._promised < due and job.rate != self._promised_rate:
            job.token += 1  # the promised join re-plans it before it can finish
            job.timer_at = math.inf
            return True
        if len(self.jobs) < 2:
            return False
        if ALONE:
            alone = self._alone.get(job.kind)
            if job.rate == (alone if alone is not None else self._alone_rate(job)):
                return False  # at its rate alone: no job leaving changes it (SoloRate)
        at = self._settled(job, due)
        if at >= due:
            return False
        self._arm(job, at)
        return True

    def _alone_rate(self, job: FluidJob) -> float | None:
        """``solo``'s rate for ``job`` with no other job (asked once per kind)."""
        assert self._solo is not None
        rate = self._alone[job.kind] = self._solo(job, [])
        return rate

    def _settled(self, job: FluidJob, due: float) -> float:
        """The finish ``job`` (a compute job with a solo rate) would be given if every
        other job left at its present due and none joined: its due at the last change
        of its rate before it finishes, with the splits the server would make (the same
        floats). Never later than ``due``; ``due`` when that is unsure (a tie)."""
        solo = self._solo
        assert solo is not None
        others = [j for j in self.jobs if j.due < due]  # (not ``job``: its due is ``due``)
        if not others:
            return due
        left = [j for j in self.jobs if j is not job]
        if len(others) > 1:
            others.sort(key=_due)
        t, rem, rate, finish = self.env._now, job.remaining, job.rate, due  # type: ignore[attr-defined]
        prev = -math.inf
        for other in others:
            at = other.due
            if at == finish or at == prev:
                return due  # a tie: which goes first is the event order's
            if at > finish:
                break  # it finishes before the next change
            prev = at
            if at > t:
                rem -= rate * (at - t)
                t = at
            left.remove(other)
            new = solo(job, left)
            if new is None or new <= 0:
                return due
            if new != rate:
                rate = new
                finish = t + (rem if rem > 0.0 else 0.0) / rate
        return finish if finish <= due else due

    def _fire(self, timer: _Timer) -> None:
        """``timer`` (:meth:`_timer`) fired."""
        job = timer.job
        if timer.token != job.token:
            return  # re-planned earlier since this timer was set
        eid = job.eid
        if eid >= 0:  # kept by a re-plan (_schedule): on to the entry it would have set
            job.eid = -1
            job.timer_at = job.live = key = job.key
            timer.callbacks = self._ring
            heappush(self.env._queue, (key, NORMAL, eid, timer))  # type: ignore[attr-defined]
            return
        due = job.due
        if self.env._now < due:  # type: ignore[attr-defined]  # slowed since: wait on
            job.timer_at = due  # for the finish its rate gives now (the same timer)
            timer.callbacks = self._ring
            job.live = queue_at(self.env, due, timer)
            return
        self._finish(job)

    def _finish(self, job: FluidJob) -> None:
        folded = self.folded
        if folded is not None and not folded.absorb(job):
            folded.materialise()
            folded = None
        job.token += 1
        job.due = job.timer_at = math.inf
        self._advance()
        job.remaining = 0.0
        self._remove(job)
        if self._solo is None:
            self._replan()
        elif not self._has_solo(job):
            self._changed(job, joined=False)  # (no solo rate: it changed others)
        if folded is not None and not folded.holds():
            folded.materialise()
        if job.then is not None:
            job.then()
            return
        assert job.done is not None
        job.done.succeed()

    def submit(self, job: FluidJob) -> simpy.Event:
        """Start ``job`` now; the returned event fires when it has received all its work."""
        job.done = self.env.event()
        if job.work <= 0:
            return job.done.succeed()
        self._start(job)
        return job.done

    def _start(self, job: FluidJob) -> None:
        """Put ``job`` (work > 0) on the server now."""
        folded = self.folded
        if folded is not None and not folded.absorb(job):
            folded.materialise()
            folded = None
        self._advance()
        self._add(job)
        solo = self._solo
        if solo is None:
            self._replan(new=job)
        elif self._solo_kinds.get(job.kind) is False:
            self._changed(job, joined=True)
        else:
            rate = solo(job, self.jobs)
            self._solo_kinds[job.kind] = rate is not None
            if rate is not None:
                job.rate = rate
                self._schedule(job)
            else:
                self._changed(job, joined=True)
        if folded is not None and not folded.holds():
            folded.materialise()

    def _has_solo(self, job: FluidJob) -> bool:
        """Whether ``solo`` gives ``job``'s kind a rate (asked once per kind)."""
        has = self._solo_kinds.get(job.kind)
        if has is None:
            assert self._solo is not None
            has = self._solo_kinds[job.kind] = self._solo(job, self.jobs) is not None
        return has

    def then_submit(self, job: FluidJob, then: Callable[[], None]) -> None:
        """:meth:`submit`, and call ``then()`` in the finish itself, not one event later
        when ``done`` is processed (a chain of callbacks, sim.load_chain)."""
        if job.work <= 0:
            self.submit(job).callbacks.append(lambda _ev: then())  # type: ignore[union-attr]
            return
        job.then = then
        self._start(job)  # no ``done`` event: the finish calls ``then`` instead

    def adopt(self, job: FluidJob, since: float, marks: list[float] | None = None
              ) -> simpy.Event:
        """Start ``job`` as if :meth:`submit` had started it at ``since`` (<= now) and its
        rate had held since: it finishes when that submit would have finished it. When the
        server was idle meanwhile, its remaining work at the next change is exactly what
        that run would have left, so later re-plans match too (a resumed folded decode
        step, sim.fold). With ``marks`` (the change times :meth:`unexpect` returned) a
        job with a solo rate joins without a change: its remaining work is charged
        interval by interval at the changes since ``since``, as the run that submitted
        it then charged it, whatever else ran meanwhile."""
        job.done = self.env.event()
        if job.work <= 0:
            return job.done.succeed()
        if self.folded is not None:
            self.folded.materialise()
        rate = (self._solo(job, self.jobs) if self._solo is not None and marks is not None
                else None)
        if rate is not None:
            return self._adopt_solo(job, since, rate, marks or [])
        self._advance()
        idle = not self.jobs
        if idle:
            self._last = since  # charged from ``since`` at the next change, as submit's
        before = [j.rate for j in self.jobs]
        self._add(job)
        self._allocate(self.jobs)
        for other, rate in zip(self.jobs, before, strict=False):
            if other.rate != rate:
                self._schedule(other)
        if not idle:
            job.remaining -= job.rate * (self.env.now - since)
        job.token += 1
        if job.rate <= 0:
            return job.done  # stalled until a re-plan gives it a rate
        token = job.token
        finish = since + max(0.0, job.work) / job.rate
        job.due = job.timer_at = max(finish, self.env.now)
        self._timer(job, token, job.due)
        return job.done

    def _adopt_solo(self, job: FluidJob, since: float, rate: float, marks: list[float]
                    ) -> simpy.Event:
        self._catch_up(since)  # the skipped changes before it began charge the others
        if self._last < since:  # its submit's own change, which the fold skipped
            for other in self.jobs:
                other.remaining -= other.rate * (since - self._last)
            self._last = since
        last = self._last
        points = [m for m in marks if since < m <= last]
        if last > since and (not points or points[-1] != last):
            points.append(last)
        prev = since
        job.rate = rate
        for at in points:
            job.remaining -= rate * (at - prev)
            prev = at
        self._add(job)
        job.token += 1
        token = job.token
        now = self.env.now
        finish = since + max(0.0, job.work) / rate
        job.due = job.timer_at = max(finish, now)
        self._timer(job, token, job.due)
        assert job.done is not None
        return job.done

    def replan(self) -> None:
        """Re-allocate now: something the allocation reads changed (a fault, a shared
        resource's users)."""
        folded = self.folded
        if folded is not None and not folded.absorb(None):
            folded.materialise()
            folded = None
        if folded is not None or self.jobs:  # (the folded jobs are charged up to now too)
            self._advance()
            self._replan()
        if folded is not None and not folded.holds():
            folded.materialise()

    def cancel(self, job: FluidJob) -> None:
        """Drop an unfinished ``job``: its ``done`` event never fires (an abandoned call)."""
        if self.folded is not None:
            self.folded.materialise()
        if job not in self.jobs:
            return
        self._advance()
        job.token += 1
        job.due = job.timer_at = math.inf
        self._remove(job)
        self._replan()

    def run(self, job: FluidJob) -> Generator[simpy.Event, Any, None]:
        """Process-body form of :meth:`submit`."""
        yield self.submit(job)

    def active(self, kind: str | None = None, tag: str | None = None) -> bool:
        return any((kind is None or j.kind == kind) and (tag is None or tag in j.tags)
                   for j in self.jobs)
