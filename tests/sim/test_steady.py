"""The steady decode path (sim.steady): a plan that repeats the rows of the plan before
is checked and placed as the slice-by-slice path would, and bad plans fail as they do
there (the same error, naming the same field), whatever the runtime remembered."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import simpy
from simtoys import host_copy_of_prefill, make_runtime

from hicache.runtime.handles import Kind, StaleHandleError
from hicache.runtime.interface import (
    BatchPlan,
    CapacityError,
    LoadIntent,
    Phase,
    Release,
    RequestSlice,
    decode_slice,
)
from sim import steady
from sim.runtime import SimRuntime

PAGE = 16
_MATCH = steady.SteadyRows.match


class _Toy:
    """A tiny scheduler: requests join (a prefill batch of their own), decode in join
    order one token a batch, finish, and are released by the next plan; now and then
    an external allocation grows a row outside any prepare (as sim.fold places the
    pages of folded steps), and a request leaves the plans unreleased, released two
    plans later (as one a fold finished: the rows of before, less its row)."""

    def __init__(self, rt: SimRuntime, env: simpy.Environment, seed: int) -> None:
        self.rt, self.env, self.rand = rt, env, random.Random(seed)
        self.running: list[list] = []  # [rid, handle, context, left]
        self.release: list = []
        self.later: list = []  # [plans to wait, handle]: released when due
        self.next_rid, self.bid = 1, 0
        self.seen: list = []

    def step(self) -> None:
        rand, rt = self.rand, self.rt
        self.bid += 1
        for due in self.later:
            due[0] -= 1
        self.release += [h for n, h in self.later if n <= 0]
        self.later = [due for due in self.later if due[0] > 0]
        releases = tuple(Release(h) for h in self.release)
        self.release = []
        if not self.running or rand.random() < 0.15:  # a request joins
            prompt = rand.choice([PAGE, 2 * PAGE, PAGE + 3, 3 * PAGE - 1, 5])
            plan = BatchPlan(self.bid, slices=(RequestSlice(self.next_rid, Phase.PREFILL, 0,
                                                            prompt),), releases=releases)
            h = self._run(plan)
            self.running.append([self.next_rid, h.slices[0].request, prompt,
                                 rand.randint(1, 3 * PAGE)])
            self.next_rid += 1
            return
        if rand.random() < 0.05:  # a fold's pages: the first row grows outside a prepare
            r = self.running[0]
            row = rt.rows[r[1].slot_id]
            need = len(row.pages) * PAGE - r[2] + 1
            row.append(rt.device[Kind.FULL].allocate(1), own=True)
            r[2] += need  # the folded steps' tokens
        if len(self.running) > 1 and rand.random() < 0.08:  # finished in a fold
            gone = self.running.pop(rand.randrange(len(self.running)))
            self.later.append([2, gone[1]])
        slices = []
        for r in self.running:
            r[3] -= 1
            slices.append(decode_slice(r[0], r[2], r[1], r[3] == 0))
            r[2] += 1
        self._run(BatchPlan(self.bid, slices=tuple(slices), releases=releases))
        self.release = [r[1] for r in self.running if r[3] == 0]
        self.running = [r for r in self.running if r[3]]

    def _run(self, plan: BatchPlan):
        h = self.rt.prepare_batch(plan)
        st = self.rt._prepared[plan.batch_id]
        self.seen.append(([(s.rid, s.request, list(s.kv.pages()), s.loaded) for s in h.slices],
                          list(st.decodes), list(st.prefills), st.finished))
        self.rt.execute_batch(h)
        self.env.run()
        return h


def _run(profile, model, seed: int, steps: int, on: bool, monkeypatch) -> tuple[_Toy, Counter]:
    counts: Counter[str] = Counter()
    match = _MATCH

    def counted(self, slices):
        stale = not self.current()
        got = match(self, slices) if on else None
        counts["matched" if got else "general"] += 1
        if got and got[2] is not got[0].zeros:
            counts["new pages"] += sum(got[2])
        if got and len(got[1]) < len(slices):
            counts["joined"] += 1
        if got and got[0] is not self:
            counts["skipped rows"] += 1
        if got and stale:
            counts["refreshed"] += 1
        return got

    monkeypatch.setattr(steady.SteadyRows, "match", counted)
    env = simpy.Environment()
    toy = _Toy(make_runtime(env, profile, model, device_pages={Kind.FULL: 4096}), env, seed)
    for _ in range(steps):
        toy.step()
    return toy, counts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_steady_plans_are_placed_as_slice_by_slice(profile, model, seed, monkeypatch) -> None:
    """The same pages, handles, decodes and finished requests, batch by batch, and the
    same pool after; the steady path was taken (with new pages, joins, and pages placed
    outside a prepare in between), so a wrong one would show."""
    off, _ = _run(profile, model, seed, 300, False, monkeypatch)
    on, counts = _run(profile, model, seed, 300, True, monkeypatch)
    assert on.seen == off.seen
    assert counts["matched"] > 100 and counts["new pages"] > 5 and counts["joined"] > 5
    assert counts["skipped rows"] > 5 and counts["refreshed"] > 5
    a, b = on.rt.device[Kind.FULL], off.rt.device[Kind.FULL]
    assert a.free_count == b.free_count
    assert a.allocate(a.free_count) == b.allocate(b.free_count)


def _steady_pair(env, profile, model, **kw):
    """A runtime whose last plan decoded requests 1 and 2 (rows remembered)."""
    rt = make_runtime(env, profile, model, **kw)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, PAGE + 2),
                                              RequestSlice(2, Phase.PREFILL, 0, 5))))
    rt.execute_batch(h)
    env.run()
    one, two = (s.request for s in h.slices)
    plan = BatchPlan(2, slices=(decode_slice(1, PAGE + 2, one, False),
                                decode_slice(2, 5, two, False)))
    rt.execute_batch(rt.prepare_batch(plan))
    env.run()
    assert rt.steady is not None and rt.steady.rows == [rt.rows[one.slot_id],
                                                        rt.rows[two.slot_id]]
    return rt, one, two


def test_a_repeated_plan_matches_and_a_changed_one_does_not(env, profile, model) -> None:
    rt, one, two = _steady_pair(env, profile, model)
    same = (decode_slice(1, PAGE + 3, one, False), decode_slice(2, 6, two, False))
    sd = rt.steady
    assert sd.match(same) == (sd, [PAGE + 3, 6], [0, 0])
    sub, ctx, new = sd.match(same[::-1])  # another order: the first slice's row on
    assert sub.rows == sd.rows[1:] and (ctx, new) == ([6], [0])
    sub, ctx, new = sd.match(same[:1])  # fewer: the rows named
    assert sub.rows == sd.rows[:1] and (ctx, new) == ([PAGE + 3], [0])
    assert sub.caps == sd.caps[:1] and sub.prepared == sd.prepared[:1]
    at_end = (decode_slice(1, 2 * PAGE, one, False), decode_slice(2, PAGE, two, False))
    assert sd.match(at_end) == (sd, [2 * PAGE, PAGE], [True, True])  # a page each
    assert sd.match((decode_slice(1, 2 * PAGE + 1, one, False), same[1])) is None
    chunk = RequestSlice(1, Phase.DECODE, PAGE + 3, 2, request=one)  # two tokens
    assert sd.match((chunk, same[1])) is None
    assert sd.match((RequestSlice(3, Phase.PREFILL, 0, 5), *same)) is None  # a first one


def test_a_stale_handle_is_refused_after_a_release(env, profile, model) -> None:
    """Request 1 released: a plan that repeats the rows of before names its closed slot
    as the general check does (the remembered rows are dropped with the release)."""
    rt, one, two = _steady_pair(env, profile, model)
    rt.execute_batch(rt.prepare_batch(BatchPlan(3, slices=(decode_slice(2, 6, two, False),),
                                                releases=(Release(one),))))
    env.run()
    with pytest.raises(StaleHandleError, match=f"request 1: request slot {one.slot_id} "
                                               "is not open"):
        rt.prepare_batch(BatchPlan(4, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 7, two, False))))


def test_a_release_of_a_remembered_row_by_a_cache_only_plan(env, profile, model) -> None:
    """A plan without slices releases request 1 (as a fold's frees do): the next plan
    that still lists it is refused, the rows of before not trusted."""
    rt, one, two = _steady_pair(env, profile, model)
    rt.execute_batch(rt.prepare_batch(BatchPlan(-1, releases=(Release(one),))))
    env.run()
    assert rt.steady is None
    with pytest.raises(StaleHandleError, match="is not open"):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 6, two, False))))


def test_a_restart_forgets_the_rows(env, profile, model) -> None:
    rt, one, two = _steady_pair(env, profile, model)
    rt.restart()
    with pytest.raises(StaleHandleError):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 6, two, False))))


def test_bad_repeated_plans_fail_as_in_the_general_check(env, profile, model) -> None:
    rt, one, two = _steady_pair(env, profile, model)
    used = rt.device[Kind.FULL].used_count
    with pytest.raises(ValueError, match=r"request 2: context 40 tokens but only 1 pages"):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 40, two, False))))
    with pytest.raises(ValueError, match="request 1 appears twice in batch 3"):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 6, two, False),
                                              decode_slice(1, PAGE + 3, one, False))))
    with pytest.raises(ValueError, match="both releases and continues"):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 6, two, False)),
                                   releases=(Release(two),)))
    with pytest.raises(ValueError, match="its handle is request 1's"):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(2, PAGE + 3, one, False),
                                              decode_slice(1, 6, two, False))))
    assert rt.device[Kind.FULL].used_count == used and len(rt.rows) == 2  # nothing changed
    h = rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 6, two, False))))
    assert [s.kv.num_pages for s in h.slices] == [2, 1]


def test_pages_placed_outside_a_prepare_are_seen(env, profile, model) -> None:
    """A row grown outside a prepare (sim.fold's pages of folded steps) holds more
    pages than the runtime remembered: the next plan is checked against the row as it
    is (no new page where the row has one; refused where its context is beyond)."""
    rt, one, two = _steady_pair(env, profile, model)
    row = rt.rows[two.slot_id]
    row.append(rt.device[Kind.FULL].allocate(1), own=True)  # pages for tokens 16..31
    h = rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, PAGE, two, False))))
    assert [s.kv.num_pages for s in h.slices] == [2, 2]
    rt.execute_batch(h)
    env.run()
    assert rt.steady is not None and rt.steady.caps == [2 * PAGE, 2 * PAGE]


def test_a_plan_of_new_requests_keeps_the_rows(env, profile, model) -> None:
    """A prefill of a new request between decode batches leaves the rows as they were:
    the next decode plan, the new request joined at its end, still matches its first
    slices, and the joined slice is placed (and checked) one by one."""
    rt, one, two = _steady_pair(env, profile, model)
    kept = rt.steady
    h = rt.prepare_batch(BatchPlan(3, slices=(RequestSlice(3, Phase.PREFILL, 0, PAGE),)))
    rt.execute_batch(h)
    env.run()
    assert rt.steady is kept and kept.current()
    three = h.slices[0].request
    plan = BatchPlan(4, slices=(decode_slice(1, PAGE + 3, one, False),
                                decode_slice(2, 6, two, False),
                                decode_slice(3, PAGE, three, True)))
    checked = rt.apply_frees(plan)
    assert checked.steady is kept and checked.new == [0, 0, 1] and checked.firsts == 0
    h4 = rt.prepare_batch(BatchPlan(5, slices=plan.slices))
    assert [s.kv.num_pages for s in h4.slices] == [2, 1, 2]
    assert rt._prepared[5].decodes == [PAGE + 3, 6, PAGE] and rt._prepared[5].finished == (3,)
    # request 3 finishes: the next plan may repeat requests 1 and 2 alone
    assert rt.steady.rows == [rt.rows[one.slot_id], rt.rows[two.slot_id]]


def test_rows_given_a_page_stay_remembered(env, profile, model) -> None:
    """A steady plan whose rows reach their last page places one page each and keeps
    counting them: the next plan matches again (no slice-by-slice check)."""
    rt, one, two = _steady_pair(env, profile, model)
    h = rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, 2 * PAGE, one, False),
                                              decode_slice(2, PAGE, two, False))))
    assert [s.kv.num_pages for s in h.slices] == [3, 2]
    rt.execute_batch(h)
    env.run()
    assert rt.steady.caps == [3 * PAGE, 2 * PAGE] and rt.steady.current()
    nxt = (decode_slice(1, 2 * PAGE + 1, one, False), decode_slice(2, PAGE + 1, two, False))
    assert rt.steady.match(nxt) == (rt.steady, [2 * PAGE + 1, PAGE + 1], [0, 0])


def test_a_steady_plan_beyond_the_free_pages_is_refused_whole(env, profile, model) -> None:
    """Both rows reach their last page with one page free: refused as the general
    capacity check refuses it (its message), and nothing changed, not even the first
    row's page; with the page a release returns, it is placed."""
    rt, one, two = _steady_pair(env, profile, model, device_pages={Kind.FULL: 4})
    plan = BatchPlan(3, slices=(decode_slice(1, 2 * PAGE, one, False),
                                decode_slice(2, PAGE, two, False)))
    with pytest.raises(CapacityError, match="batch 3 needs 2 L1 pages of pool 'full', 1 free"):
        rt.prepare_batch(plan)
    assert [len(rt.rows[h.slot_id].pages) for h in (one, two)] == [2, 1]
    assert rt.device[Kind.FULL].free_count == 1 and 3 not in rt._prepared
    assert rt.steady.match(plan.slices)[1:] == ([2 * PAGE, PAGE], [True, True])  # as it was
    h = rt.prepare_batch(BatchPlan(3, slices=plan.slices[:1]))  # the general path
    assert h.slices[0].kv.num_pages == 3 and rt.device[Kind.FULL].free_count == 0


def test_an_equal_handle_is_left_to_the_general_check(env, profile, model) -> None:
    """A handle equal to a row's by value (one that crossed a process) is not the very
    one the row holds: its slice is not matched (the one before it is), and the general
    check accepts it as before."""
    rt, one, two = _steady_pair(env, profile, model)
    copy = (decode_slice(1, PAGE + 3, one, False), decode_slice(2, 6, replace(two), False))
    sub, contexts, _ = rt.steady.match(copy)
    assert sub.rows == rt.steady.rows[:1] and contexts == [PAGE + 3]
    assert rt.steady.match(copy[::-1]) is None
    h = rt.prepare_batch(BatchPlan(3, slices=copy))
    assert [s.kv.num_pages for s in h.slices] == [2, 1] and h.slices[1].request is two


def test_joined_slices_that_repeat_a_request_fail_as_in_the_general_check(
        env, profile, model) -> None:
    """The rows matched, then slices that joined: a rid repeated among the joined ones,
    or one of a matched row, is named as the slice-by-slice check names it (the first
    slice whose rid an earlier one has), and nothing changes."""
    rt, one, two = _steady_pair(env, profile, model)
    used = rt.device[Kind.FULL].used_count
    head = (decode_slice(1, PAGE + 3, one, False), decode_slice(2, 6, two, False))
    new = RequestSlice(3, Phase.PREFILL, 0, 5)
    for tail, rid in (((new, RequestSlice(4, Phase.PREFILL, 0, 5), new), 3),
                      ((new, RequestSlice(2, Phase.PREFILL, 0, 5), new), 2)):
        with pytest.raises(ValueError, match=f"request {rid} appears twice in batch 3"):
            rt.prepare_batch(BatchPlan(3, slices=head + tail))
    assert rt.device[Kind.FULL].used_count == used and len(rt.rows) == 2
    h = rt.prepare_batch(BatchPlan(3, slices=(*head, new)))
    assert [s.kv.num_pages for s in h.slices] == [2, 1, 1]


def test_a_joined_slices_loads_count_beside_matched_rows(env, profile, model) -> None:
    """The rows matched (later slices: only their new pages count); a first slice after
    them still counts its loads, with the general check's message."""
    rt, one, two = _steady_pair(env, profile, model, device_pages={Kind.FULL: 8})
    host = host_copy_of_prefill(rt, env, rid=5, tokens=4 * PAGE, batch_id=9)
    head = (decode_slice(1, PAGE + 3, one, False), decode_slice(2, 6, two, False))
    first = RequestSlice(3, Phase.PREFILL, 4 * PAGE, 2 * PAGE, loads=(LoadIntent(host),))
    assert rt.steady.match((*head, first)) is not None
    with pytest.raises(CapacityError, match="needs 6 L1 pages of pool 'full', 5 free"):
        rt.prepare_batch(BatchPlan(3, slices=(*head, first)))
    h = rt.prepare_batch(BatchPlan(3, slices=(*head, replace(first, new_tokens=PAGE))))
    assert [s.kv.num_pages for s in h.slices] == [2, 1, 5]


@pytest.mark.parametrize("which", [0, 1])
def test_a_release_of_any_listed_row_drops_the_rows(env, profile, model, which) -> None:
    """Whichever remembered row a release closes (the first or the last one), the rows
    are dropped, and a plan that still lists it is refused as the general check does."""
    rt, one, two = _steady_pair(env, profile, model)
    gone = (one, two)[which]
    rt.execute_batch(rt.prepare_batch(BatchPlan(-1, releases=(Release(gone),))))
    env.run()
    assert rt.steady is None
    with pytest.raises(StaleHandleError, match=f"request slot {gone.slot_id} is not open"):
        rt.prepare_batch(BatchPlan(3, slices=(decode_slice(1, PAGE + 3, one, False),
                                              decode_slice(2, 6, two, False))))
