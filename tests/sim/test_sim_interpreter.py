"""The CPU runtime's interpreter lock (sim.interpreter) and thread wake-ups (sim.host).

Speeds are round numbers: python work stops a lane (0.05) and runs at full speed (1.0);
torch work and a lane crawl beside each other (0.25 / 0.2); two lanes run at 0.5 each.
"""

from __future__ import annotations

import copy
import random

import pytest
import simpy
from simtoys import TOY_PROFILE, make_runtime, toy_model

from hicache.runtime.interface import BatchPlan, Phase, RequestSlice
from sim.fluid import FluidJob
from sim.hardware.profile import InterpreterSpec, load_profile
from sim.interpreter import DRIVER, INTERPRETER, PYTHON, Interpreter

SPEEDS = {"driver_python": 1.0, "lane_python": 0.05, "driver_torch": 0.25,
          "lane_torch": 0.2, "lanes": 0.5}
SPEC = InterpreterSpec(**SPEEDS, wake_s=4e-5)


def base(jobs: list[FluidJob]) -> None:  # the link: compute at full speed
    for j in jobs:
        if j.kind == "compute":
            j.rate = 1.0


def allocate(*jobs: FluidJob) -> list[float]:
    Interpreter(SPEC, base).allocate(list(jobs))
    return [j.rate for j in jobs]


def driver(kind: str = PYTHON) -> FluidJob:
    return FluidJob(1.0, INTERPRETER, tags=frozenset({kind}), gil=1.0, thread=DRIVER)


def layer(gil: float, thread: str = "compute") -> FluidJob:
    return FluidJob(1.0, "compute", gil=gil, thread=thread)


def test_one_busy_thread_runs_at_its_solo_rate():
    assert allocate(driver()) == [1.0]
    assert allocate(layer(0.8)) == [1.0]
    assert allocate(layer(0.8), layer(0.3)) == [1.0, 1.0]  # one thread, one op at a time


def test_python_work_stops_a_lane_and_torch_work_makes_both_crawl():
    d, lane = allocate(driver(PYTHON), layer(1.0))
    assert lane == pytest.approx(0.05) and d == pytest.approx(1.0)
    d, lane = allocate(driver("torch"), layer(1.0))
    assert lane == pytest.approx(0.2) and d == pytest.approx(0.25)


def test_only_the_interpreter_share_of_an_op_slows_down():
    _, lane = allocate(driver("torch"), layer(0.5))
    assert lane == pytest.approx(1 / (0.5 / 0.2 + 0.5))  # native half at full speed
    d, native = allocate(driver("torch"), layer(0.0))  # a pure kernel: no contention
    assert native == 1.0 and d == 1.0
    # a layer of long kernels seldom holds the lock: the driver slows less beside it
    d_small, _ = allocate(driver("torch"), layer(0.1))
    d_big, _ = allocate(driver("torch"), layer(0.9))
    assert 0.25 < d_big < d_small < 1.0


def test_two_lanes_share_the_lock():
    a, b = allocate(layer(1.0, "compute"), FluidJob(1.0, INTERPRETER, gil=1.0, thread="d2h"))
    assert a == pytest.approx(0.5) and b == pytest.approx(0.5)


def test_rates_never_grow_under_contention():
    rng = random.Random(7)
    for _ in range(200):
        jobs = [layer(rng.random(), rng.choice(["compute", "h2d", "d2h"]))
                for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.7:
            jobs.append(driver(rng.choice([PYTHON, "torch"])))
        for rate in allocate(*jobs):  # every solo rate is 1 here
            assert 0 < rate <= 1.0


# -- in the simulated runtime -------------------------------------------------------------
SETUP, PREPARE, STEP = 2e-4, 5e-5, 1e-4
C0, PER_TOKEN = 1e-4, 1e-6  # a layer: 100 us of per-op overhead (the lock's), 1 us a token


def cpu_profile(ablate=(), **cpu):
    data = copy.deepcopy(TOY_PROFILE)
    data["cpu"].update({"interpreter": {**SPEEDS, "wake_s": 4e-5}, "op_gap_s": 2e-6,
                        "scheduler_step_s": STEP, **cpu})
    data["ablate"] = list(ablate)
    pre = [[b, n, 0, C0 + PER_TOKEN * b * n] for b, n in ((1, 16), (1, 256), (1, 1024),
                                                          (2, 256), (4, 64))]
    dec = [[b, 1, c, C0 + PER_TOKEN * b] for b in (1, 4, 16) for c in (32, 256)]
    data["calibrated"] = {"device": "cpu", "compute": {"prefill": pre, "decode": dec},
                          "host": {"setup": [[1, 16, 0, SETUP], [4, 16, 0, SETUP]],
                                   "prepare": [[1, 16, PREPARE], [4, 16, PREPARE]]}}
    return load_profile(data)


def rows(rt, lane, batch=None):
    return sorted((r for r in rt.timeline.rows if r.lane == lane
                   and (batch is None or r.batch == batch)), key=lambda r: r.start)


def prefill(rt, bid: int, rid: int, tokens: int = 512) -> None:
    rt.execute_batch(rt.prepare_batch(BatchPlan(bid, slices=(
        RequestSlice(rid, Phase.PREFILL, 0, tokens),))))


def test_layers_stall_while_the_driver_prepares_the_next_batch_unless_ablated():
    grown = {}
    for ablate in ((), ("interpreter",)):
        env = simpy.Environment()
        rt = make_runtime(env, cpu_profile(ablate), toy_model())
        prefill(rt, 1, 1)
        env.run(until=1e-3)  # batch 1 computes (4 layers of ~0.6 ms)
        prefill(rt, 2, 2)  # the driver prepares and executes batch 2 beside it
        env.run()
        layers = [r for r in rows(rt, "compute", 1) if r.layer >= 0]
        solo = rt.cost.batch_layer_times([(512, 0)], [])
        grown[bool(ablate)] = sum(r.end - r.start for r in layers) - sum(solo)
    assert grown[True] == pytest.approx(0.0, abs=1e-9)  # no lock: the layers run solo
    # with it: prepare (python) nearly stops the layer, the setup (torch) slows it, and it
    # resumes a wake-up after the driver blocks
    assert 0.5 * (PREPARE + SETUP) < grown[False] < 2 * (PREPARE + SETUP)


def test_a_lane_that_waited_wakes_up_and_queued_ops_follow_after_the_gap():
    env = simpy.Environment()
    rt = make_runtime(env, cpu_profile(), toy_model())
    prefill(rt, 1, 1, tokens=16)
    env.run()
    exe = rows(rt, "cpu", 1)[1]
    comp = rows(rt, "compute", 1)
    # the first layer waited for its launch (end of execute: CPU launches cost nothing):
    # its worker wakes up; the driver's last python work stalls it until then at most
    assert comp[0].start >= exe.start + SETUP
    for a, b in zip(comp, comp[1:], strict=False):  # then back to back: the hand-off gap
        assert b.start - a.end == pytest.approx(2e-6)


def test_the_driver_wakes_up_before_the_step_that_handles_a_completion():
    env = simpy.Environment()
    rt = make_runtime(env, cpu_profile(wakeup_s=3e-5), toy_model())
    lane = rt.host_lane
    done = lane.run(STEP)
    env.run(done)
    assert env.now == pytest.approx(3e-5 + STEP)  # woke (nothing queued), then the step
    lane.completed(prefilled=True, finished=2)
    t0 = env.now
    a = lane.run(STEP)  # queued now; the next one queues behind it: no wake-up for that
    b = lane.run(STEP)
    env.run(b)
    assert a.processed and env.now - t0 == pytest.approx(3e-5 + 2 * STEP)


def test_a_step_charges_the_work_its_completions_left():
    prof = cpu_profile(insert_step_s=7e-5, finish_step_s=2e-5)
    env = simpy.Environment()
    rt = make_runtime(env, prof, toy_model())
    lane = rt.host_lane
    lane.completed(prefilled=True, finished=3)
    lane.completed(prefilled=False, finished=1)
    t0 = env.now
    env.run(lane.run(STEP))
    assert env.now - t0 == pytest.approx(STEP + 7e-5 + 4 * 2e-5)
    t0 = env.now
    env.run(lane.run(STEP))  # owed once: the next step pays its own time only
    assert env.now - t0 == pytest.approx(STEP)
