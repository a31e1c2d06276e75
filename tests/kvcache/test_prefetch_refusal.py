"""The arrival-time prefetch start a queued request was refused (no L2 room in the share)
is not tried again while its refusal stands (``L3Prefetcher._refusal_stands``: the tree's
shape unchanged, the share left or the L2 room still short of its rest): no match, no host
lock taken and dropped per scheduler step, and the scheduler's queue counts as still
(``L3Prefetcher.still``), so decode folds may start.

Twin runs (the memo on, and off by making ``_refusal_stands`` always say no) must give the
same decisions, records and timelines; and wherever the memo answers "refused", the
start's own arithmetic on a fresh match must refuse too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))
from scheduler_scenarios import L3_MOONCAKE, scenario  # noqa: E402

from hicache.kvcache.prefetch import L3Prefetcher  # noqa: E402
from hicache.scenario import load_scenario  # noqa: E402
from hicache.tiers.prefetch import should_query  # noqa: E402
from sim.driver import SimResult, simulate  # noqa: E402
from tests.shared_data import CONVERSATION_TRACE, skip_reason  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WIDE = {"num_clients": 16, "num_rounds": 4, "request_length": 1024, "output_length": 8,
        "request_rate": 8}


def _wide(share: float, policy: str) -> dict:
    cache = {"device_tokens": 8192, "hicache_ratio": 2, **L3_MOONCAKE,
             "hicache_storage_prefetch_policy": policy}
    # one timeline row per decode step, folded or not (the memo lets more folds start)
    return scenario(workload=WIDE, cache=cache, scheduler={"prefetch_share": share},
                    run={"timeline_steps": True})


def _trace(requests: int) -> object:
    if not CONVERSATION_TRACE.exists():
        pytest.skip(skip_reason(CONVERSATION_TRACE))
    sc = load_scenario(ROOT / "scenarios/mooncake_trace.yaml",
                       [f"workload.max_requests={requests}", "run.layerwise=true",
                        f"workload.path={CONVERSATION_TRACE}", "run.timeline_steps=true"])
    return dict(sc.expand())["L1+L2+L3"]


def _start_refuses(pf: L3Prefetcher, st: object) -> bool:
    """What :meth:`L3Prefetcher.start` on arrival decides for ``st`` now, by its own
    arithmetic on a fresh match (no lock, no intent): True = refused (no room yet)."""
    m = pf.tree.match(st.pages, touch=False, memo=True)  # type: ignore[attr-defined]
    rest = len(st.pages) - m.total_tokens // pf.page  # type: ignore[attr-defined]
    if rest <= 0 or not should_query(rest * pf.page, pf.cache):
        return False  # decided: nothing worth fetching
    max_pages = min(rest, pf._share_left(), pf.budget.host_free())
    return max_pages < pf.threshold_pages or max_pages < rest


def _observed(monkeypatch: pytest.MonkeyPatch, sc: object) -> tuple[SimResult, int]:
    """The run with the memo on; every "refusal stands" checked against the start's own
    decision. Returns the run and how many times the memo answered yes."""
    real = L3Prefetcher._refusal_stands
    hits = 0

    def checked(self: L3Prefetcher, st: object) -> bool:
        nonlocal hits
        stands = real(self, st)  # type: ignore[arg-type]
        if stands:
            hits += 1
            assert _start_refuses(self, st), f"request {st.rid}: the memo refused a start " \
                                             f"that would go"  # type: ignore[attr-defined]
        return stands

    monkeypatch.setattr(L3Prefetcher, "_refusal_stands", checked)
    res = simulate(sc, progress=False)
    monkeypatch.setattr(L3Prefetcher, "_refusal_stands", real)
    return res, hits


def _plain(monkeypatch: pytest.MonkeyPatch, sc: object) -> SimResult:
    """The run with the memo off: every undecided front tries its start again."""
    with monkeypatch.context() as m:
        m.setattr(L3Prefetcher, "_refusal_stands", lambda self, st: False)
        return simulate(sc, progress=False)


def _assert_same(a: SimResult, b: SimResult) -> None:
    assert a.decisions == b.decisions
    assert a.records == b.records  # equal floats, not close
    assert a.sim_time == b.sim_time
    for x, y in zip(a.replicas, b.replicas, strict=True):
        assert sorted(x.timeline.as_tuples()) == sorted(y.timeline.as_tuples())
        assert x.runtime.batch_shapes == y.runtime.batch_shapes


@pytest.mark.parametrize("share, policy", [(0.05, "timeout"), (0.05, "wait_complete"),
                                           (0.1, "best_effort")])
def test_refused_starts_are_not_retried_and_runs_are_unchanged(
        monkeypatch: pytest.MonkeyPatch, share: float, policy: str) -> None:
    sc = _wide(share, policy)
    memo, hits = _observed(monkeypatch, sc)
    assert hits > 0  # the memo answered (the small share refuses arrivals)
    _assert_same(memo, _plain(monkeypatch, sc))


def test_refused_starts_on_the_trace_are_not_retried_and_the_run_is_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sc = _trace(400)
    memo, hits = _observed(monkeypatch, sc)
    assert hits > 0
    _assert_same(memo, _plain(monkeypatch, sc))
