"""Faults in the simulator (sim.faults): each kind does what it says in its window, every
request still completes once, nothing is counted twice, and summary.json says what each
fault cost. The base run: 16 chat clients x 6 rounds whose later rounds hit L3 (prefetches
from ~1 s to ~5 s of simulated time); faults sit in [2, 4)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hicache.report.frames import requests_frame
from hicache.scenario import Scenario
from sim.driver import SimResult, simulate
from sim.report import summary_of, timeline_of

WINDOW = (2.0, 4.0)
BASE: dict[str, Any] = {
    "name": "faults", "hardware": "h100-sxm", "model": "llama-3-8b",
    "cache": {"enable_hierarchical_cache": True, "page_size": 64, "device_tokens": 16000,
              "hicache_ratio": 1.25, "hicache_storage_backend": "mooncake",
              "hicache_write_policy": "write_through",
              "hicache_storage_prefetch_policy": "timeout"},
    "workload": {"kind": "multiturn", "num_clients": 16, "num_rounds": 6,
                 "request_length": 1024, "output_length": 16, "request_rate": 8,
                 "max_parallel": 16},
    "run": {"fault_twin": False},
}


def scenario(*faults: dict[str, Any], **sections: dict[str, Any]) -> Scenario:
    d = copy.deepcopy(BASE)
    for key, values in sections.items():
        if isinstance(values, dict) and isinstance(d.get(key), dict):
            d[key].update(values)
        else:
            d[key] = values
    d["faults"] = [{"start": WINDOW[0], "end": WINDOW[1], **f} for f in faults]
    return Scenario.from_mapping(d)


@pytest.fixture(scope="module")
def healthy() -> SimResult:
    return simulate(scenario())


def summary(res: SimResult) -> dict[str, Any]:
    return summary_of(res, requests_frame(res.records), timeline_of(res))


def rows(res: SimResult, lane: str, op: str | None = None, replica: int = 0) -> list:
    return [r for r in res.replicas[replica].timeline.rows
            if r.lane == lane and (op is None or r.op == op)]


def inside(r: Any) -> bool:
    return r.start >= WINDOW[0] and r.end <= WINDOW[1]


def overlaps(r: Any) -> bool:
    return r.start < WINDOW[1] and r.end > WINDOW[0]


def check_complete_once(res: SimResult) -> None:
    """Every request issued finished exactly once; L3 hits never exceed what was read."""
    rids = [r["rid"] for r in res.records]
    assert len(rids) == len(set(rids)) == res.requests == 16 * 6
    assert all(r["finish"] is not None for r in res.records) and not res.unfinished
    rt = res.replicas[0].runtime
    l3_tokens = sum(r["l3_hit"] for r in res.records)
    assert l3_tokens * rt.model.kv_bytes_per_token() <= rt.l3_bytes["read"]
    read_rows = sum(r.bytes for rep in res.replicas for r in rep.timeline.rows
                    if r.lane == "l3" and r.op == "prefetch")
    assert read_rows == sum(rep.runtime.l3_bytes["read"] for rep in res.replicas)


def test_the_healthy_run_reads_l3_inside_the_fault_window(healthy) -> None:
    check_complete_once(healthy)
    assert sum(1 for r in rows(healthy, "l3", "prefetch") if inside(r)) >= 5
    assert not rows(healthy, "fault") and "faults" not in summary(healthy)


def test_store_down_fails_every_call_then_the_guard_skips_and_lost_hits_are_recomputed(
        healthy) -> None:
    res = simulate(scenario({"kind": "l3_store_down", "lose_data": False}))
    check_complete_once(res)
    assert not [r for r in rows(res, "l3", "prefetch") if inside(r)]  # nothing read while down
    assert not [r for r in rows(res, "l3", "store") if inside(r)]
    c = res.replicas[0].runtime.l3_client.counts
    assert c["l3_errors"] >= 1 and c["l3_skipped"] >= 1 and c["l3_reconnects"] == 1
    f = summary(res)["faults"][0]
    assert f["requests_lost_hits"] >= 1 and f["extra_recompute_tokens"] >= 64
    assert f["l3_errors"] + f["l3_skipped"] == c["l3_errors"] + c["l3_skipped"]
    assert f["keys_lost"] == 0  # lose_data: false
    assert sum(r["l3_hit"] for r in res.records) < sum(r["l3_hit"] for r in healthy.records)


def test_a_restarted_store_has_lost_every_key(healthy) -> None:
    res = simulate(scenario({"kind": "l3_store_down", "start": 1.0, "end": 2.5}))
    store = res.replicas[0].runtime.l3
    f = summary(res)["faults"][0]
    assert f["keys_lost"] > 0 and set(store.lost.values()) == {0}
    assert not set(store.lost) & set(store.keys)  # a lost key is back only once rewritten
    assert [r for r in rows(res, "l3", "store") if r.start >= 2.5]  # written again after
    check_complete_once(res)


def test_node_down_loses_its_keys_and_the_rest_keep_serving(healthy) -> None:
    res = simulate(scenario({"kind": "l3_node_down", "node": 1}))
    check_complete_once(res)
    assert [r for r in rows(res, "l3", "prefetch") if inside(r)]  # the other nodes serve
    store = res.replicas[0].runtime.l3
    f = summary(res)["faults"][0]
    assert f["keys_lost"] > 0 and f["l3_errors"] == 0  # a lost key is a miss, not an error
    assert f["requests_lost_hits"] >= 1 and not set(store.lost) & set(store.keys)
    assert any(node == 1 for _, node in store.keys.values())  # back, and written to again


def test_a_hanging_store_times_prefetches_out_at_their_deadline() -> None:
    res = simulate(scenario({"kind": "l3_timeout"}))
    check_complete_once(res)
    hung = [r for r in rows(res, "l3") if r.op.endswith("_timeout")]
    assert hung and all(r.end - r.start >= 2.0 - 1e-9 for r in hung)  # RetryPolicy: 2 s + bytes
    c = res.replicas[0].runtime.l3_client.counts
    f = summary(res)["faults"][0]
    assert c["l3_timeouts"] == len(hung) == f["l3_timeouts"] and f["requests_lost_hits"] >= 1


def test_the_scenario_sets_the_l3_retry_policy_the_simulator_runs() -> None:
    """run.l3_retry: a 0.25 s deadline and no retry end hung calls 8x sooner than the
    default 2 s, and every timed-out operation is one attempt."""
    res = simulate(scenario({"kind": "l3_timeout"}, run={
        "fault_twin": False, "l3_retry": {"timeout_s": 0.25, "retries": 0}}))
    check_complete_once(res)
    assert res.replicas[0].runtime.l3_client.policy.timeout_s == 0.25
    hung = [r for r in rows(res, "l3") if r.op.endswith("_timeout")]
    assert hung and all(0.25 - 1e-9 <= r.end - r.start < 1.0 for r in hung)
    assert res.replicas[0].runtime.l3_client.counts["l3_retries"] == 0


def test_a_lost_nic_cuts_only_its_replica_off_l3() -> None:
    res = simulate(scenario({"kind": "link_down", "link": "nic", "replica": 0},
                            replicas=2, workload={"num_clients": 16}))
    assert len(res.records) == res.requests and all(r["finish"] is not None for r in res.records)
    c0, c1 = (rep.runtime.l3_client.counts for rep in res.replicas)
    assert c0["l3_timeouts"] >= 1 and c1["l3_timeouts"] == 0 and c1["l3_errors"] == 0
    assert rows(res, "fault", replica=0) and not rows(res, "fault", replica=1)


def _rates(rs: list) -> list[float]:
    return [r.bytes / (r.end - r.start) for r in rs if r.bytes and r.end > r.start]


def test_a_slow_pcie_link_caps_copies_in_the_window(healthy) -> None:
    res = simulate(scenario({"kind": "link_slow", "link": "pcie", "factor": 0.1}))
    check_complete_once(res)
    peak = res.replicas[0].runtime.profile.pcie.h2d_bytes_per_s
    during = _rates([r for r in rows(res, "pcie:h2d") if inside(r)])
    before = _rates([r for r in rows(res, "pcie:h2d") if r.end <= WINDOW[0]])
    assert during and max(during) <= 0.1 * peak * 1.0001
    assert max(before) > 0.5 * peak  # outside the window the link runs at full speed
    ttft = sum(r["ttft"] for r in res.records) - sum(r["ttft"] for r in healthy.records)
    assert ttft > 0


def test_a_slow_nic_caps_l3_reads_in_the_window() -> None:
    res = simulate(scenario({"kind": "link_slow", "link": "nic", "factor": 0.05}))
    check_complete_once(res)
    nic = res.replicas[0].runtime.profile.mooncake.nic_bytes_per_s
    during = _rates([r for r in rows(res, "l3", "prefetch") if inside(r)])
    assert during and max(during) <= 0.05 * nic * 1.0001
    f = summary(res)["faults"][0]  # slow prefetches end after their requests were admitted
    assert f["requests_lost_hits"] >= 1 and f["l3_errors"] == 0


def test_host_memory_pressure_squeezes_pcie_and_l3_together() -> None:
    res = simulate(scenario({"kind": "host_pressure", "bandwidth_factor": 0.05}))
    check_complete_once(res)
    host = res.replicas[0].runtime.profile.host_memory_bytes_per_s
    for lane in ("pcie:h2d", "pcie:d2h"):
        assert max(_rates([r for r in rows(res, lane) if inside(r)]), default=0) <= (
            0.05 * host * 1.0001)
    assert summary(res)["faults"][0]["requests_exposed"] >= 1


def test_each_fault_has_a_fault_lane_row_cut_at_the_end_of_the_run(healthy) -> None:
    late = {"kind": "l3_timeout", "start": 1000.0, "end": 2000.0}
    open_ended = {"kind": "link_slow", "link": "pcie", "factor": 0.5, "start": 3.0,
                  "end": 900.0}
    res = simulate(scenario({"kind": "l3_node_down", "node": 0}, open_ended, late))
    fault_rows = rows(res, "fault")
    assert [(r.op, r.batch) for r in fault_rows] == [("l3_node_down", 0), ("link_slow", 1)]
    assert (fault_rows[0].start, fault_rows[0].end) == WINDOW
    assert fault_rows[1].end == pytest.approx(res.sim_time)  # cut: the run ended first
    assert res.sim_time < 100  # windows still queued do not stretch the run
    faults = summary(res)["faults"]
    assert faults[2]["active_s"] == 0 and faults[2]["requests_exposed"] == 0
    assert "fault" in set(timeline_of(res)["lane"])


def test_an_l3_fault_on_a_variant_without_l3_changes_nothing() -> None:
    no_l3 = {"hicache_storage_backend": None}
    res = simulate(scenario({"kind": "l3_store_down"}, cache=no_l3))
    plain = simulate(scenario(cache=no_l3))
    assert res.records == plain.records
    assert summary(res)["faults"][0]["applies"] is False


def test_the_twin_run_costs_the_faults_and_the_run_is_reproducible() -> None:
    sc = scenario({"kind": "l3_store_down"}, run={"fault_twin": True})
    a, b = simulate(sc), simulate(sc)
    assert a.records == b.records and a.decisions == b.decisions
    s = summary(a)
    f = s["faults"][0]
    assert f["requests_slower"] >= 1 and f["ttft_delta_mean_s"] > 0
    assert s["fault_extra_prefill_tokens"] > 0 and s["fault_ttft_mean_delta_s"] > 0
    assert f["requests_exposed"] >= f["requests_slower"]


@pytest.mark.parametrize("fault, message", [
    ({"kind": "link_slow", "link": "pcie", "factor": 0.5, "replica": 3}, r"faults\[0\].replica: 3"),
    ({"kind": "l3_node_down", "node": 9}, r"faults\[0\].node: 9, but the mooncake L3"),
])
def test_a_replica_or_node_that_does_not_exist_is_refused_before_running(fault, message) -> None:
    with pytest.raises(ValueError, match=message):
        simulate(scenario(fault))


def test_a_local_file_l3_has_no_nic_and_no_nodes_to_fail() -> None:
    file_l3 = {"hicache_storage_backend": "file"}
    res = simulate(scenario({"kind": "link_down", "link": "nic"},
                            {"kind": "l3_node_down", "node": 0}, cache=file_l3))
    plain = simulate(scenario(cache=file_l3))
    assert [f["applies"] for f in summary(res)["faults"]] == [False, False]
    assert res.records == plain.records
