"""An arrival's L3 prefetch that finds no room in its L2 share says no before it locks
the L1/L2 prefix it would continue (``hicache.kvcache.prefetch.ROOM_FIRST``): the lock
and unlock changed only counters, lock ids and stale heap entries. Twinned against the
old order (lock, test, unlock) on a trace whose undecided arrivals are refused step
after step: the same run, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest

import hicache.kvcache.prefetch as prefetch
from hicache.kvcache.prefetch import L3Prefetcher
from hicache.scenario import load_scenario
from sim.driver import SimResult, simulate

ROOT = Path(__file__).resolve().parents[2]
_SHARED = ROOT.parent / "shared"  # beside the repository (CI)
if not _SHARED.exists():
    _SHARED = Path("/work/shared")  # where this workplace keeps it
TRACE = _SHARED / "traces/mooncake/mooncake_conversation_trace.jsonl"

CASES = [
    ["workload.max_requests=400", "run.layerwise=true", "cache.device_tokens=60000",
     "cache.hicache_ratio=1.5"],
    ["workload.max_requests=300", "cache.device_tokens=60000", "cache.hicache_ratio=1.5",
     "cache.hicache_write_policy=write_back", "scheduler.prefetch_share=0.1"],
]


def _run(sets: list[str]) -> SimResult:
    if not TRACE.exists():
        pytest.skip("shared traces absent")
    sc = load_scenario(ROOT / "scenarios" / "mooncake_trace.yaml",
                       [*sets, f"workload.path={TRACE}"])
    return simulate(dict(sc.expand())["L1+L2+L3"], name="room", progress=False)


def _outcome(res: SimResult) -> tuple:
    return (repr(res.records), repr(res.decisions), repr(res.sim_time),
            [repr(rep.timeline.as_tuples()) for rep in res.replicas])


@pytest.mark.parametrize("sets", CASES)
def test_room_first_changes_no_result(monkeypatch: pytest.MonkeyPatch,
                                      sets: list[str]) -> None:
    refused = []
    start = L3Prefetcher.start

    def counted(self, st, m, at_head=False, whole=False):  # noqa: ANN001, ANN202
        ok = start(self, st, m, at_head, whole)
        if not ok:
            refused.append(st.rid)
        return ok

    monkeypatch.setattr(L3Prefetcher, "start", counted)
    new = _outcome(_run(sets))
    assert len(refused) > 100  # arrivals refused for room, again and again
    monkeypatch.setattr(prefetch, "ROOM_FIRST", False)
    assert _outcome(_run(sets)) == new
