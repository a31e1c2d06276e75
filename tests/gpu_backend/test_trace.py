"""A torch run can write a torch.profiler Chrome trace (``run.torch_profiler: PATH`` or
``run_scenario(torch_trace=PATH)``): valid JSON, the profiler's own events, and one named
row per runtime lane carrying the runtime's timeline on the profiler's time axis."""

from __future__ import annotations

import copy
import json

import pytest

from gpu_backend.driver import run_scenario
from gpu_backend.sched_timing import SCENARIO

SMALL = copy.deepcopy(SCENARIO)  # evicts to L2 and loads back: compute, h2d and d2h rows


def load(path) -> list[dict]:
    data = json.loads(path.read_text())
    return data["traceEvents"]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "sub" / "run.json"
    res = run_scenario(copy.deepcopy(SMALL), device="cpu", torch_trace=path)
    return path, res


def test_the_trace_is_valid_json_with_profiler_and_lane_events(traced):
    path, res = traced
    events = load(path)
    assert res.extra["torch_trace"] == str(path)
    lane_rows = [e for e in events if e.get("pid") == "hicache lanes" and e["ph"] == "X"]
    assert len(lane_rows) == len(res.timeline) > 0  # every timeline row, once
    profiler_rows = [e for e in events if e.get("ph") == "X" and e.get("pid") != "hicache lanes"]
    assert profiler_rows, "torch.profiler recorded nothing on the driver thread"


def test_one_named_row_per_lane(traced):
    path, res = traced
    events = load(path)
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("pid") == "hicache lanes" and e.get("name") == "thread_name"}
    assert set(names.values()) == {f"lane {r.lane}" for r in res.timeline.rows}
    assert {"lane compute", "lane h2d", "lane d2h"} <= set(names.values())
    by_tid = {}
    for e in events:
        if e.get("pid") == "hicache lanes" and e["ph"] == "X":
            by_tid.setdefault(names[e["tid"]], set()).add(e["cat"])
    assert all({lane.removeprefix("lane ")} == cats for lane, cats in by_tid.items())


def test_lane_events_sit_inside_the_profiled_span(traced):
    path, _ = traced
    events = load(path)
    prof = [e for e in events if e.get("ph") == "X" and e.get("pid") != "hicache lanes"]
    lanes = [e for e in events if e.get("pid") == "hicache lanes" and e["ph"] == "X"]
    lo = min(e["ts"] for e in prof)
    hi = max(e["ts"] + e.get("dur", 0) for e in prof)
    slack = 0.05e6  # us: the profiler starts just before the loop's clock reading
    assert all(lo - slack <= e["ts"] and e["ts"] + e["dur"] <= hi + slack for e in lanes)


def test_the_scenario_key_writes_the_trace_too(tmp_path):
    d = copy.deepcopy(SMALL)
    d["workload"].update(num_clients=1, num_rounds=1)
    d["run"] = {"torch_profiler": str(tmp_path / "k.json")}
    run_scenario(d, device="cpu")
    assert any(e.get("ph") == "X" for e in load(tmp_path / "k.json"))


def test_without_a_path_nothing_is_profiled(tmp_path):
    d = copy.deepcopy(SMALL)
    d["workload"].update(num_clients=1, num_rounds=1)
    res = run_scenario(d, device="cpu")
    assert "torch_trace" not in res.extra
