"""Two L3 short cuts that must do nothing: Scheduler._admit skips on_arrivals with no
request undecided, and L3Prefetcher.ready answers no at once for a queue head that waits
for its own prefetch under ``wait_complete`` (``waits_own``). Taken the long way at every
short cut, each changes nothing (and ready says no); under ``timeout`` a prefetching head
does go before its prefetch completes, so the short answer must stay with
``wait_complete``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hicache.kvcache.prefetch import L3Prefetcher
from hicache.kvcache.state import Status
from hicache.scenario import load_scenario
from hicache.scheduler.scheduler import Scheduler
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[2]
SETS = ["workload.num_rounds=10"]  # L1 fills up; heads wait for prefetches and for room


def _scenario(policy: str):  # noqa: ANN202
    sc = dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", SETS).expand())
    return sc["L1+L2+L3"].with_overrides([f"cache.hicache_storage_prefetch_policy={policy}"])


def _state(sched: Scheduler) -> tuple:
    """What an L3 call at the queue head could change."""
    l3 = sched.l3
    assert l3 is not None
    head = sched.waiting[0] if sched.waiting else None
    return (len(sched.decisions), sched.tree.changes, sched.tree.shape, l3.reserved,
            tuple(l3.jobs), sched.plans.has_pending, sched.kv.budget.host_reserved,
            None if head is None else (head.status, head.prefetch_job, head.requeried))


def test_skipped_l3_calls_would_change_nothing(monkeypatch) -> None:
    seen: Counter[str] = Counter()
    admit = Scheduler._admit

    def checking(self, now):  # noqa: ANN001, ANN202
        l3 = self.l3
        if not l3.undecided:
            before = _state(self)
            l3.on_arrivals(now)
            assert _state(self) == before, "on_arrivals changed something with none undecided"
            seen["on_arrivals"] += 1
        if self.waiting and len(self.running) < self.cfg.max_running_requests:
            st = self.waiting[0]
            if (st.req.arrival <= now and st.status is Status.PREFETCHING
                    and not st.prefetch_done):
                before = _state(self)
                l3.waits_own = False  # the long way
                try:
                    assert not l3.ready(st, now), "ready() let a head go before its prefetch"
                finally:
                    l3.waits_own = True
                assert _state(self) == before, "ready() changed something"
                seen["ready"] += 1
        return admit(self, now)

    plain = simulate(_scenario("wait_complete"), name="L1+L2+L3", progress=False)
    monkeypatch.setattr(Scheduler, "_admit", checking)
    checked = simulate(_scenario("wait_complete"), name="L1+L2+L3", progress=False)
    assert seen["on_arrivals"] > 0 and seen["ready"] > 0, f"nothing skipped: {seen}"
    assert (checked.decisions, checked.records) == (plain.decisions, plain.records)


def test_asking_ready_every_time_changes_nothing(monkeypatch) -> None:
    """The same run with ready()'s short answer off: the same decisions, records and
    timelines."""
    def observed(res):  # noqa: ANN001, ANN202
        rows = [sorted(rep.timeline.as_tuples()) for rep in res.replicas]
        return res.decisions, res.records, res.sim_time, rows

    sc = _scenario("wait_complete")
    skipping = observed(simulate(sc, name="L1+L2+L3", progress=False))
    init = L3Prefetcher.__init__

    def asking(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        init(self, *args, **kwargs)
        self.waits_own = False  # the short answer off: ready() takes the long way

    monkeypatch.setattr(L3Prefetcher, "__init__", asking)
    assert observed(simulate(sc, name="L1+L2+L3", progress=False)) == skipping


def test_timeout_lets_a_prefetching_head_go(monkeypatch) -> None:
    """The short answer is wait_complete's alone: under timeout, ready() admits heads
    whose prefetch is still running (a short no there would hold them)."""
    went: list[bool] = []
    ready = L3Prefetcher.ready

    def spying(self, st, now):  # noqa: ANN001, ANN202
        running = st.status is Status.PREFETCHING and not st.prefetch_done
        out = ready(self, st, now)
        if running:
            went.append(out)
        return out

    monkeypatch.setattr(L3Prefetcher, "ready", spying)
    extra = "cache.hicache_storage_backend_extra_config"
    sc = _scenario("timeout").with_overrides([f"{extra}.prefetch_timeout_base=0",
                                              f"{extra}.prefetch_timeout_per_ki_token=0"])
    simulate(sc, name="L1+L2+L3", progress=False)
    assert any(went), "no prefetching head went early: the test shows nothing"
