"""The driver thread's lane (``cpu``): launch-bound steps and copy issue pipelined with the
copy engine (the CPU runtime's interpreter lock: tests/sim/test_sim_interpreter.py).

Toy model (4 layers) on the toy link; host figures: setup 50 us, prepare 20 us, 1 us per
lane submit, 30 us to launch a layer, 5 us to issue a copy call."""

from __future__ import annotations

import copy

import pytest
import simpy
from simtoys import TOY_PROFILE, host_copy_of_prefill, make_runtime, toy_model

from hicache.runtime.interface import BatchPlan, LoadIntent, Phase, RequestSlice
from sim.hardware.profile import load_profile

SETUP, PREPARE, SUBMIT, LAUNCH, ISSUE = 5e-5, 2e-5, 1e-6, 3e-5, 5e-6


def host_profile(**cpu):
    data = copy.deepcopy(TOY_PROFILE)
    data["cpu"].update({"op_submit_s": SUBMIT, "layer_launch_s": LAUNCH,
                        "copy_issue_s": ISSUE, **cpu})
    data["calibrated"] = {"device": "cuda", "host": {
        "setup": [[1, 16, 0, SETUP], [4, 16, 0, SETUP]],
        "prepare": [[1, 16, PREPARE], [4, 16, PREPARE]]}}
    return load_profile(data)


def rows(rt, lane, batch):
    return [r for r in rt.timeline.rows if r.lane == lane and r.batch == batch]


def test_a_launch_bound_decode_follows_the_launches():
    env = simpy.Environment()
    rt = make_runtime(env, host_profile(), toy_model())
    t0 = env.now
    rt.execute_batch(rt.prepare_batch(BatchPlan(1, slices=(
        RequestSlice(1, Phase.PREFILL, 0, 1),))))
    env.run()
    (prep,), (exe,) = rows(rt, "cpu", 1)[:1], rows(rt, "cpu", 1)[1:]
    assert prep.start == t0 and prep.end == pytest.approx(t0 + PREPARE)
    assert exe.end - exe.start == pytest.approx(SETUP + 5 * (SUBMIT + LAUNCH))
    comp = sorted(rows(rt, "compute", 1), key=lambda r: r.start)
    t_layer = rt.cost.prefill_layer_time(1, 0)
    assert t_layer < LAUNCH  # one token: the device outruns the driver
    for i, r in enumerate(comp[:4]):  # layer i starts once it is launched
        assert r.start == pytest.approx(exe.start + SETUP + (i + 1) * (SUBMIT + LAUNCH))
    assert comp[-1].op == "sample"


def test_copy_issue_is_pipelined_with_the_engine_unless_ablated():
    ends = {}
    for ablate in ([], ["pipelined_issue"]):
        env = simpy.Environment()
        prof = load_profile({**copy.deepcopy(TOY_PROFILE), "cpu": {
            **TOY_PROFILE["cpu"], "op_submit_s": SUBMIT, "copy_issue_s": ISSUE},
            "ablate": ablate})
        rt = make_runtime(env, prof, toy_model(), layerwise=False)
        # one contiguous run of 8 pages, all layers in one op: 2 x 4 calls
        host = host_copy_of_prefill(rt, env, rid=1, tokens=8 * 16, batch_id=0)
        t0 = env.now
        rt.execute_batch(rt.prepare_batch(BatchPlan(10, slices=(RequestSlice(
            2, Phase.PREFILL, 128, 16, loads=(LoadIntent(host),)),))))
        env.run()
        (load,) = rows(rt, "h2d", 10)
        ends[bool(ablate)] = (load.start - t0, load.end - t0)
    calls = 2 * 4  # one contiguous run, K and V, 4 layers
    assert ends[False][0] == pytest.approx(SUBMIT + ISSUE)  # starts after the first call
    assert ends[True][0] == pytest.approx(SUBMIT + calls * ISSUE)  # after all of them
    assert ends[False][1] < ends[True][1]
