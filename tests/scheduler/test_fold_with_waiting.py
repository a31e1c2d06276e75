"""Decode steps fold while requests wait, when the queue is still (Scheduler._queue_still):
its head held by max_running_requests, by a remembered refusal, or by its own prefetch.
Folded and unfolded runs give the same decisions, records, timeline rows, batch shapes
and bytes, and folds do happen with a waiting queue (else the test would show nothing)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hicache.kvcache import prefetch
from hicache.scenario import load_scenario
from hicache.scheduler.scheduler import Scheduler
from sim.driver import SimResult, simulate

ROOT = Path(__file__).resolve().parents[2]
FULL_L1 = ["workload.num_rounds=10"]  # 64 clients outgrow L1: queue heads are refused
FEW_SLOTS = ["workload.num_rounds=6", "workload.num_clients=32", "cache.device_tokens=60000",
             "scheduler.max_running_requests=8"]  # heads wait for a running slot


def _run(sc: object, name: str, fold: bool) -> SimResult:
    sc = sc.with_overrides([f"run.fold_decode={str(fold).lower()}",  # type: ignore[attr-defined]
                            "run.timeline_steps=true"])
    return simulate(sc, name=name, progress=False)


def _observed(res: SimResult) -> tuple:
    rows = [sorted(rep.timeline.as_tuples()) for rep in res.replicas]
    shapes = [(rep.runtime.batch_shapes, rep.runtime.bytes_moved) for rep in res.replicas]
    return res.decisions, res.records, res.sim_time, rows, shapes


@pytest.mark.parametrize("sets, variant, held", [
    (FULL_L1, "L1", "refused"), (FULL_L1, "L1+L2+L3", "refused"),
    (FEW_SLOTS, "L1+L2", "max_running")])
def test_folds_with_a_still_queue_change_nothing(monkeypatch, sets, variant, held) -> None:
    sc = dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", sets).expand())[variant]
    plain = _observed(_run(sc, variant, False))
    seen: Counter[str] = Counter()
    fold_decode = Scheduler.fold_decode

    def spying(self, steps):  # noqa: ANN001, ANN202
        if self.waiting:
            full = len(self.running) >= self.cfg.max_running_requests
            seen["max_running" if full else "refused"] += 1
        return fold_decode(self, steps)

    monkeypatch.setattr(Scheduler, "fold_decode", spying)
    assert _observed(_run(sc, variant, True)) == plain
    assert seen[held] > 0, f"no fold with a queue head held by {held}: the test shows nothing"


@pytest.mark.parametrize("until_deadline", [True, False])
def test_timeout_policy_folds_while_the_head_waits(monkeypatch, until_deadline) -> None:
    """Under the timeout prefetch policy only the head's own deadline moves the queue by
    time alone: folds happen while a head that is not prefetching waits, and while a
    prefetching head waits for its own prefetch (before its deadline, which the fold
    ends before: sim.fold._before), or never then with the switch off; and change
    nothing."""
    monkeypatch.setattr(prefetch, "STILL_UNTIL_DEADLINE", until_deadline)
    sc = dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", FULL_L1).expand())[
        "L1+L2+L3"].with_overrides(["cache.hicache_storage_prefetch_policy=timeout"])
    plain = _observed(_run(sc, "L1+L2+L3", False))
    seen: Counter[str] = Counter()
    steady = Scheduler.steady_decode

    def spying(self, plan):  # noqa: ANN001, ANN202
        # steady_decode asks _queue_still only once its cheaper tests pass: ask it here at
        # every fold opportunity (it decides nothing), as the fold's entry would
        if self.waiting:
            head = self.waiting[0].status.name.lower()
            seen[f"{head} {'still' if self._queue_still() else 'moving'}"] += 1
        return steady(self, plan)

    monkeypatch.setattr(Scheduler, "steady_decode", spying)
    assert _observed(_run(sc, "L1+L2+L3", True)) == plain
    assert (seen["prefetching still"] > 0) is until_deadline, seen
    assert seen["waiting still"] > 0, f"no still queue with a waiting head: {seen}"
    if not until_deadline:
        assert seen["prefetching moving"] > 0, f"no prefetching head: shows less: {seen}"


def test_same_decode_needs_the_same_requests_in_order_all_decoding() -> None:
    """Two plans are one steady decode pipeline's steps only if every slice of both is a
    decode slice and their requests are the same, in the same order."""
    from hicache.runtime.interface import BatchPlan, Phase, RequestSlice
    from hicache.scheduler.scheduler import _same_decode

    def plan(bid: int, *slices: tuple[int, Phase]) -> BatchPlan:
        return BatchPlan(bid, tuple(RequestSlice(rid, ph, 100, 1) for rid, ph in slices))

    d, p = Phase.DECODE, Phase.PREFILL
    a = plan(1, (4, d), (7, d), (9, d))
    assert _same_decode(a, plan(2, (4, d), (7, d), (9, d)))
    assert not _same_decode(a, plan(2, (4, d), (9, d), (7, d)))  # another order
    assert not _same_decode(a, plan(2, (4, d), (7, d)))  # one fewer
    assert not _same_decode(a, plan(2, (4, d), (7, d), (9, d), (11, d)))  # one more
    assert not _same_decode(a, plan(2, (4, d), (7, p), (9, d)))  # one prefilling
    assert not _same_decode(plan(1, (4, d), (7, d), (9, p)), a)  # in either plan
    assert _same_decode(plan(1), plan(2))  # no slices: vacuously (steady_decode needs some)
