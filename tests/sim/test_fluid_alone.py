"""Two shortcuts of the fluid server's compute jobs (sim.fluid): ``compute_job`` builds
the job ``FluidJob(work, "compute", thread=...)`` builds, slot for slot; and a compute
job already at its rate alone gets its timer at its due without ``_settled`` (no job
leaving can change that rate: SoloRate's contract), twinned against asking
``_settled`` every time (``ALONE`` off): the same finishes, bit for bit, and the same events."""

from __future__ import annotations

import random

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st
from simtoys import layer_pipeline, random_jobs, side_traffic, toy_profile

import sim.fluid as fluid_module
from sim.driver import events_scheduled
from sim.fluid import FluidJob, FluidServer, compute_job
from sim.link import PcieLink


@given(work=st.one_of(st.floats(0.0, 1e3), st.integers(0, 10**6)),
       thread=st.sampled_from(["", "compute", "h2d"]))
def test_compute_job_is_the_constructors_job(work: float, thread: str) -> None:
    made, plain = compute_job(work, thread), FluidJob(work, "compute", thread=thread)
    for slot in FluidJob.__slots__:
        a, b = getattr(made, slot), getattr(plain, slot)
        assert type(a) is type(b) and (a == b or (a != a and b != b)), slot
    with pytest.raises(ValueError):
        compute_job(-1.0)


def _server(env: simpy.Environment, link: PcieLink) -> tuple[FluidServer, list[int]]:
    """A server on ``link`` and its count of ``_settled`` calls."""
    server = FluidServer(env, link.allocate, solo=link.solo_rate, shift=link.shift_rate)
    settled = [0]
    plain_settled = server._settled

    def counted(job: FluidJob, due: float) -> float:
        settled[0] += 1
        return plain_settled(job, due)

    server._settled = counted  # type: ignore[method-assign]
    return server, settled


def _pipeline(seed: int) -> tuple[list[str], int, int]:
    """A batch's layer pipeline (promised launches, compute slowed by each kernel) with
    random L3 transfers and d2h kernels beside it (test_fluid_plan's)."""
    rng = random.Random(seed)
    env = simpy.Environment()
    link = PcieLink(toy_profile())
    link.host = rng.uniform(40e9, 80e9)
    server, settled = _server(env, link)
    layers = 16
    loads = [rng.uniform(1e5, 4e6) for _ in range(layers)]
    work = [rng.uniform(2e-5, 2e-4) for _ in range(layers)]
    out: list[str] = []
    state, launch = layer_pipeline(env, server, link.slowdown, loads, work, 5e-6, out)

    side_traffic(env, server, rng, out)
    env.timeout(5e-6).callbacks.append(lambda _ev: launch(0))
    env.run()
    assert state["next"] == layers
    return out, events_scheduled(env), settled[0]


def _program(seed: int) -> tuple[list[str], int, int]:
    """Random compute jobs, copy kernels, plain copies and L3-like jobs on one link (host
    memory binding at times): every finish (repr), the events queued, the ``_settled``
    calls."""
    rng = random.Random(seed)
    env = simpy.Environment()
    link = PcieLink(toy_profile())
    link.host = rng.uniform(40e9, 90e9)
    server, settled = _server(env, link)
    out: list[str] = []

    random_jobs(env, server, rng, out, ["compute", "compute", "compute", "h2d", "d2h"], 40,
                compute_job)
    env.run()
    return out, events_scheduled(env), settled[0]


@pytest.mark.parametrize("program", [_program, _pipeline])
def test_a_job_at_its_rate_alone_is_timed_as_settled_would_time_it(program, monkeypatch
                                                                  ) -> None:
    asked = {True: 0, False: 0}
    for seed in range(60):
        monkeypatch.setattr(fluid_module, "ALONE", True)
        out, events, asked_on = program(seed)
        monkeypatch.setattr(fluid_module, "ALONE", False)
        plain_out, plain_events, asked_off = program(seed)
        assert out == plain_out, seed
        assert events == plain_events, seed
        asked[True] += asked_on
        asked[False] += asked_off
    assert asked[True] < asked[False]  # the shortcut was taken
