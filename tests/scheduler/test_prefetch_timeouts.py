"""The L3 prefetcher's timeout short cut against the code it replaced, kept here verbatim:
under ``timeout`` a queue head whose own prefetch runs is told to wait by
``L3Prefetcher._waits`` (a remembered timeout per page count, ``_timeout``) without
``stop_decision``, and ``next_deadline`` reads the same timeouts.

Property tests compare ``_waits`` and ``next_deadline`` with ``stop_decision`` on random
times, configurations and page counts; twin runs (the new code, then the old) over random
small worlds give the same decisions, records, end time and timelines."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from hicache.config import CacheConfig
from hicache.kvcache.decisions import PrefetchStop
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.plans import PlanBuilder
from hicache.kvcache.prefetch import L3Prefetcher
from hicache.kvcache.state import RequestState, Status
from hicache.runtime.handles import Kind
from hicache.runtime.interface import RuntimeInfo
from hicache.scenario import load_scenario
from hicache.tiers.prefetch import stop_decision
from hicache.tree.radix import page_keys
from hicache.workload.request import Request
from sim.driver import simulate

ROOT = Path(__file__).resolve().parents[2]
EXTRA = "cache.hicache_storage_backend_extra_config"
PAGE = 4


# -- the replaced code, verbatim (the twin runs' "off" side) ------------------------------
def _old_ready(self: L3Prefetcher, st: RequestState, now: float) -> bool:
    if self.waits_own and st.status is Status.PREFETCHING and not st.prefetch_done:
        return False
    if self.skip_over_share and st.prefetch_job is None:
        self._start_or_skip(st)
    if st.prefetch_job is None or self._lost_prefix(st):
        self.start(st, self.tree.match(st.pages, touch=False, memo=True), at_head=True)
    if st.status is not Status.PREFETCHING:
        return True
    policy = self.cache.hicache_storage_prefetch_policy
    if policy == "wait_complete" and not st.prefetch_done:
        return False
    d = stop_decision(policy, now=now,
                      arrival=st.req.arrival, completed=st.prefetch_done,
                      hit_tokens=st.prefetch_pages * self.page, cfg=self.cache)
    if not d.proceed:
        return False
    self.kv.log(PrefetchStop(st.rid, d.reason))
    st.status = Status.WAITING
    return True


def _old_next_deadline(self: L3Prefetcher, waiting, now: float) -> float | None:  # noqa: ANN001
    if self.cache.hicache_storage_prefetch_policy != "timeout":
        return None
    times = []
    for st in waiting:
        if st.status is Status.PREFETCHING:
            d = stop_decision("timeout", now=now, arrival=st.req.arrival, completed=False,
                              hit_tokens=st.prefetch_pages * self.page, cfg=self.cache)
            if d.deadline is not None and d.deadline > now:
                times.append(d.deadline)
    return min(times) if times else None


# -- properties: the short answers are stop_decision's -------------------------------------
def _prefetcher(base: float, per_ki: float, most: float) -> L3Prefetcher:
    extra = {"prefetch_timeout_base": base, "prefetch_timeout_per_ki_token": per_ki,
             "prefetch_timeout_max": most}
    cache = CacheConfig(page_size=PAGE, device_tokens=16 * PAGE,
                        enable_hierarchical_cache=True, hicache_storage_backend="mooncake",
                        hicache_storage_prefetch_policy="timeout",
                        hicache_storage_backend_extra_config=extra)
    info = RuntimeInfo("r", 0, PAGE, {Kind.FULL: 16}, {Kind.FULL: 64})
    return L3Prefetcher(KVCacheManager(cache, info, PlanBuilder(), l3=True))


def _prefetching(rid: int, arrival: float, pages: int) -> RequestState:
    st = RequestState(Request(rid, arrival, list(range(8 * PAGE)), 2),
                      page_keys(list(range(8 * PAGE)), PAGE))
    st.status, st.prefetch_job, st.prefetch_pages = Status.PREFETCHING, rid, pages
    return st


times = hs.floats(min_value=0.0, max_value=100.0, allow_nan=False)
seconds = hs.floats(min_value=0.0, max_value=5.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(base=seconds, per_ki=seconds, most=hs.floats(0.0, 40.0), arrival=times, now=times,
       pages=hs.lists(hs.integers(0, 300), min_size=1, max_size=4))
def test_waits_answers_as_stop_decision(base, per_ki, most, arrival, now, pages) -> None:
    l3 = _prefetcher(base, per_ki, most)
    for rid, n in enumerate(pages, 1):  # several counts: one remembered timeout each
        st = _prefetching(rid, arrival, n)
        d = stop_decision("timeout", now=now, arrival=arrival, completed=False,
                          hit_tokens=n * PAGE, cfg=l3.cache)
        assert l3._waits(st, now) is (not d.proceed)
        assert l3.ready(st, now) is d.proceed  # the long way says the same
        assert st.status is (Status.WAITING if d.proceed else Status.PREFETCHING)
        done = _prefetching(rid + 100, arrival, n)
        done.prefetch_done = True  # completed: goes whatever the time
        assert l3.ready(done, now) and done.status is Status.WAITING


@settings(max_examples=200, deadline=None)
@given(base=seconds, per_ki=seconds, most=hs.floats(0.0, 40.0), now=times,
       queue=hs.lists(hs.tuples(times, hs.integers(0, 300), hs.booleans()), max_size=6))
def test_next_deadline_is_stop_decisions(base, per_ki, most, now, queue) -> None:
    l3 = _prefetcher(base, per_ki, most)
    waiting = []
    for rid, (arrival, pages, prefetching) in enumerate(queue, 1):
        st = _prefetching(rid, arrival, pages)
        if not prefetching:
            st.status = Status.WAITING
        waiting.append(st)
    for _ in range(2):  # the second asks with every timeout remembered
        assert l3.next_deadline(waiting, now) == _old_next_deadline(l3, waiting, now)


# -- twin runs: the new code, then the old ------------------------------------------------
def _observed(sc) -> tuple:  # noqa: ANN001
    res = simulate(sc.with_overrides(["run.timeline_steps=true"]), name="twin", progress=False)
    rows = [sorted(rep.timeline.as_tuples()) for rep in res.replicas]
    return res.decisions, res.records, res.sim_time, rows


def _world(seed: int, base: float, share: float, over: str, policy: str, l1: int):  # noqa: ANN202
    """Conversations that outgrow a small L1 and L2 (heads wait for room and for their
    prefetches); short timeouts let heads go before their prefetch completes."""
    return dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", [
        f"seed={seed}", "workload.num_clients=16", "workload.num_rounds=6",
        f"cache.device_tokens={l1}", "cache.hicache_ratio=2",
        f"cache.hicache_storage_prefetch_policy={policy}",
        f"{EXTRA}.prefetch_timeout_base={base}", f"{EXTRA}.prefetch_timeout_per_ki_token=0.001",
        f"scheduler.prefetch_share={share}", f"scheduler.prefetch_over_share={over}",
    ]).expand())["L1+L2+L3"]


def _twin(sc) -> tuple[tuple, tuple, dict[str, int]]:  # noqa: ANN001
    """(new run, old run, how often the new run's short cut said wait and go on)."""
    seen = {"wait": 0, "go": 0}
    waits = L3Prefetcher._waits

    def counting(self, st, now):  # noqa: ANN001, ANN202
        out = waits(self, st, now)
        seen["wait" if out else "go"] += 1
        return out

    saved = L3Prefetcher._waits, L3Prefetcher.ready, L3Prefetcher.next_deadline
    try:
        L3Prefetcher._waits = counting
        new = _observed(sc)
        L3Prefetcher._waits = waits
        L3Prefetcher.ready, L3Prefetcher.next_deadline = _old_ready, _old_next_deadline
        old = _observed(sc)
    finally:
        L3Prefetcher._waits, L3Prefetcher.ready, L3Prefetcher.next_deadline = saved
    return new, old, seen


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=hs.integers(0, 50), base=hs.sampled_from([0.0, 0.001, 0.002, 2.0]),
       share=hs.sampled_from([0.05, 0.1, 0.25]), over=hs.sampled_from(["wait", "skip"]),
       policy=hs.sampled_from(["timeout", "timeout", "wait_complete", "best_effort"]),
       l1=hs.sampled_from([6000, 8000, 12000]))
def test_short_cuts_change_nothing(seed, base, share, over, policy, l1) -> None:
    new, old, _ = _twin(_world(seed, base, share, over, policy, l1))
    assert new == old


def test_worlds_take_every_short_cut() -> None:
    """Worlds where heads wait and go on their timeout, and the twins agree."""
    seen = {"wait": 0, "go": 0}
    for world in [(1, 0.0, 0.05, "wait", "timeout", 6000),
                  (0, 0.002, 0.05, "wait", "timeout", 12000)]:
        new, old, took = _twin(_world(*world))
        assert new == old, f"world {world}"
        seen = {k: seen[k] + took[k] for k in seen}
    assert all(seen.values()), f"a short cut never taken: the test shows nothing ({seen})"
