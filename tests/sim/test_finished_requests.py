"""A finished request keeps only its record's fields (RequestState.forget): no extent,
runtime handle, lock, page keys or hashes, no container the cyclic collector tracks, and
its prompt's page keys are no longer memoised on its tokens. Twinned against the old
forget, which kept all of that: the same run, bit for bit."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from hicache.kvcache.prefetch import L3Prefetcher
from hicache.kvcache.state import RequestState, Status
from hicache.scenario import load_scenario
from hicache.workload.tokens import BlockTokens
from sim.driver import SimResult, simulate
from tests.shared_data import CONVERSATION_TRACE, skip_reason

ROOT = Path(__file__).resolve().parents[2]
TRACE = CONVERSATION_TRACE

# a small L1 and L2 under the timeout policy: L3 prefetches, some of them completing
# after their request was admitted (and finished), evictions from both tiers
SETS = ["workload.max_requests=300", "run.layerwise=true", "cache.device_tokens=60000",
        "cache.hicache_ratio=1.5"]
FIELDS = ("pages", "hashes", "load_nodes", "donated", "chunk_locks", "attach")


def _hybrid() -> SimResult:
    """Multi-turn chat on a hybrid model whose SWA and MAMBA pools have L1 and L2 tiers:
    requests keep checkpoints and state extents handed to the tree."""
    sc = load_scenario(ROOT / "scenarios" / "hybrid_swa_mamba.yaml",
                       ["workload.num_clients=8", "workload.num_rounds=4"])
    return simulate(dict(sc.expand())["L1+L2 hybrid-aware"], name="hybrid", progress=False)


def _old_forget(self: RequestState) -> None:
    """RequestState.forget before it dropped extents, handles and tokens' page keys."""
    self.pages, self.hashes, self.load_nodes = [], [], []
    self.lock = self.host_lock = self.prefix_lock = self.prefetch_lock = None


# the shipped H100 profile with a 0.7 GB/s Mooncake NIC, so that some prefetches outlive
# their timeout, their request and its decode
SLOW_L3 = "hardware.l3.mooncake.nic_bytes_per_s=7e8"


def _run(*extra: str) -> SimResult:
    if not TRACE.exists():
        pytest.skip(skip_reason(TRACE))
    sc = load_scenario(ROOT / "scenarios" / "mooncake_trace.yaml",
                       [*SETS, *extra, f"workload.path={TRACE}"])
    return simulate(dict(sc.expand())["L1+L2+L3"], name="forget", progress=False)


def _outcome(res: SimResult) -> tuple:
    return (repr(res.records), repr(res.decisions), repr(res.sim_time),
            [repr(rep.timeline.as_tuples()) for rep in res.replicas])


def test_finished_requests_hold_nothing_but_their_record() -> None:
    res = _run()
    states = [st for rep in res.replicas for st in rep.scheduler.requests.values()]
    assert len(states) == 300 and {st.status for st in states} <= {Status.DONE,
                                                                   Status.REJECTED}
    assert sum(st.status is Status.DONE for st in states) > 250
    assert sum(r["l3_hit"] for r in res.records) > 0  # prefetches brought pages
    for st in states:
        assert st.kv is None and st.handle is None
        assert all(getattr(st, f) == () for f in FIELDS)
        assert not any(gc.is_tracked(getattr(st, f)) for f in FIELDS)
        assert (st.lock, st.host_lock, st.prefix_lock, st.prefetch_lock) == (None,) * 4
        assert isinstance(st.req.tokens, BlockTokens)
        assert st.req.tokens._keys is None  # noqa: SLF001 - the memo it dropped
        assert (st.record()["finish"] is None) == (st.status is Status.REJECTED)


@pytest.mark.parametrize("run", [_run, _hybrid])
def test_forgetting_more_changes_no_result(monkeypatch: pytest.MonkeyPatch, run) -> None:  # noqa: ANN001
    new = _outcome(run())
    monkeypatch.setattr(RequestState, "forget", _old_forget)
    assert _outcome(run()) == new


def test_a_request_finished_before_its_prefetch_landed_is_forgotten_when_it_lands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduler._finish keeps what a prefetch still in flight inserts by (its pages and
    L3 keys); L3Prefetcher.done inserts the pages, then forgets the request."""
    late: list[RequestState] = []
    done = L3Prefetcher.done

    def watched(self: L3Prefetcher, c) -> None:  # noqa: ANN001
        st = self.jobs[c.job_id]
        if st.status is Status.DONE:
            assert st.pages and st.hashes and st.kv is not None  # kept for the insert
            late.append(st)
        done(self, c)

    monkeypatch.setattr(L3Prefetcher, "done", watched)
    res = _run(SLOW_L3)
    assert len(late) >= 3
    for st in late:
        assert st.kv is None and st.handle is None and st.prefetch_done
        assert all(getattr(st, f) == () for f in FIELDS)
    assert _outcome(res) == _outcome(_run_forgetting_nothing(monkeypatch, SLOW_L3))


def _run_forgetting_nothing(monkeypatch: pytest.MonkeyPatch, *extra: str) -> SimResult:
    """The same run with forget a no-op: every finished request keeps all it held."""
    monkeypatch.setattr(RequestState, "forget", lambda self: None)
    return _run(*extra)


def test_finished_hybrid_requests_keep_no_state_extent() -> None:
    res = _hybrid()
    states = [st for rep in res.replicas for st in rep.scheduler.requests.values()]
    assert states and all(st.status is Status.DONE for st in states)
    for st in states:
        assert st.checkpoint == () and st.state_donated == {} and st.reserved == {}
        assert not gc.is_tracked(st.state_donated)
        assert all(getattr(st, f) == () for f in FIELDS)


def test_page_keys_are_rebuilt_equal_after_a_drop() -> None:
    from array import array

    tokens = BlockTokens(array("q", [3, 9, 4]), 1100, block=512)
    keys = tokens.page_keys(64)
    assert keys is not None and tokens.page_keys(64) is keys  # memoised
    tokens.drop_page_keys()
    again = tokens.page_keys(64)
    assert again == keys and again is not keys
