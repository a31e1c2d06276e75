"""Random fault schedules on a tiny two-replica run: every request still completes exactly
once, L3 hits never exceed the bytes read, each started fault has its lane row, and the
tree and pool invariants hold every few steps. Examples per run come from the
HYPOTHESIS_PROFILE (tests/conftest.py: ci 100, soak 5,000)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hicache.scenario import Scenario
from sim.driver import Replica, simulate
from sim.invariants import check_replica

BASE: dict[str, Any] = {
    "name": "tiny", "hardware": "h100-sxm", "model": "llama-3-8b", "replicas": 2,
    "cache": {"enable_hierarchical_cache": True, "page_size": 64, "device_tokens": 6144,
              "hicache_ratio": 1.5, "hicache_storage_backend": "mooncake",
              "hicache_write_policy": "write_through",
              "hicache_storage_prefetch_policy": "timeout"},
    "workload": {"kind": "multiturn", "num_clients": 6, "num_rounds": 4,
                 "request_length": 512, "output_length": 8, "request_rate": 8,
                 "max_parallel": 6},
    "run": {"fault_twin": False},
}
replica = st.none() | st.integers(0, 1)
factor = st.floats(0.01, 1.0)
kinds = st.one_of(
    st.fixed_dictionaries({"kind": st.just("l3_node_down"), "node": st.integers(0, 3)}),
    st.fixed_dictionaries({"kind": st.just("l3_store_down"), "lose_data": st.booleans()}),
    st.fixed_dictionaries({"kind": st.just("l3_timeout")}),
    st.fixed_dictionaries({"kind": st.just("link_slow"),
                           "link": st.sampled_from(["pcie", "nic"]), "factor": factor,
                           "replica": replica}),
    st.fixed_dictionaries({"kind": st.just("link_down"), "link": st.just("nic"),
                           "replica": replica}),
    st.fixed_dictionaries({"kind": st.just("host_pressure"), "bandwidth_factor": factor,
                           "replica": replica}),
)
faults = st.lists(st.tuples(kinds, st.floats(0.0, 1.5), st.floats(0.01, 3.0)), max_size=4)


@given(faults)
def test_any_fault_schedule_completes_every_request_once(schedule: list) -> None:
    sc = Scenario.from_mapping({**BASE, "faults": [
        {**f, "start": start, "end": start + length} for f, start, length in schedule]})
    steps = [0]

    def observe(_i: int, rep: Replica) -> None:
        steps[0] += 1
        if steps[0] % 5 == 0:
            check_replica(rep.scheduler, rep.runtime)

    res = simulate(sc, observe=observe)
    rids = [r["rid"] for r in res.records]
    assert len(rids) == len(set(rids)) == res.requests == 24 and not res.unfinished
    assert all(r["finish"] is not None for r in res.records)
    for i, rep in enumerate(res.replicas):
        check_replica(rep.scheduler, rep.runtime)
        rt = rep.runtime
        l3_tokens = sum(r["l3_hit"] for r in res.records if r["replica"] == i)
        assert l3_tokens * rt.model.kv_bytes_per_token() <= rt.l3_bytes["read"]
    for i, cost in enumerate(res.faults.costs if res.faults else ()):
        if cost.started is not None:
            assert any(r.lane == "fault" and r.batch == i
                       for rep in res.replicas for r in rep.timeline.rows)
