"""The simulator predicts what the runtime in its own process costs (run.runtime_process):
each wake-up's poll and each plan's prepare and execute crossing, from the hardware
profile's measured ``cpu.ipc_*`` figures; with overlap on, the crossings of batch N+1
hide behind batch N."""

from __future__ import annotations

import copy

import pytest

from sim.boundary import CrossingCost
from sim.driver import simulate
from sim.hardware.profile import load_profile

ONE = {
    "name": "boundary", "seed": 0, "model": "llama-3-8b", "hardware": "h100-sxm",
    "cache": {"page_size": 16, "device_tokens": 65536, "enable_hierarchical_cache": False},
    "scheduler": {"overlap": False, "max_running_requests": 8},
    "workload": {"kind": "multiturn", "num_clients": 1, "num_rounds": 1,
                 "request_length": 2048, "output_length": 64, "request_rate": 1000.0},
}


def run(d: dict, process: bool) -> list[dict]:
    d = copy.deepcopy(d)
    d["run"] = {"runtime_process": process}
    res = simulate(d)
    assert not res.unfinished
    return res.records


def test_a_lone_request_pays_one_wakeup_and_one_plan_before_its_first_token():
    cost = CrossingCost(load_profile("h100-sxm"), True)
    (local,), (remote,) = run(ONE, False), run(ONE, True)
    extra = remote["ttft"] - local["ttft"]
    assert extra == pytest.approx(cost.wakeup() + cost.plan(1), rel=1e-9, abs=1e-12)
    assert cost.plan(1) > cost.wakeup() > 0  # a prepare carries more than a poll


def test_overlap_hides_decode_crossings_and_no_overlap_pays_them_per_token():
    cost = CrossingCost(load_profile("h100-sxm"), True)
    per_token = cost.wakeup() + cost.plan(1)
    d = copy.deepcopy(ONE)
    serial = [r["itl_mean"] for r in (run(d, False)[0], run(d, True)[0])]
    assert serial[1] - serial[0] == pytest.approx(per_token, rel=0.05)
    d["scheduler"]["overlap"] = True
    overlapped = [r["itl_mean"] for r in (run(d, False)[0], run(d, True)[0])]
    assert overlapped[1] - overlapped[0] < 0.1 * per_token  # hidden behind the batch


def test_a_profile_without_the_figures_is_refused_by_name():
    profile = load_profile("h100-sxm")
    import dataclasses

    bare = dataclasses.replace(profile, ipc_crossing_s=None, ipc_prepare_s=())
    with pytest.raises(ValueError, match="cpu.ipc_crossing_s"):
        CrossingCost(bare, True)
    assert CrossingCost(bare, False).plan(256) == 0.0
