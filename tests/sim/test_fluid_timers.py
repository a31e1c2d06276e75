"""The fluid server's own bookkeeping shortcuts (sim.fluid): its timers are slotted objects
queued by :func:`sim.streams.queue_at` where a timeout would be queued (tested beside
call_at in test_stream_direct.py), and it asks ``solo`` once per kind whether that kind
has a solo rate. Twinned against the plain forms: the same finishes, bit for bit, and the
same events in the same order."""

from __future__ import annotations

import random

import pytest
import simpy
from simtoys import KERNEL, random_jobs, toy_profile

from sim.driver import events_scheduled
from sim.fluid import FluidJob, FluidServer
from sim.link import PcieLink


class _Forgetful(dict):
    """A ``_solo_kinds`` that remembers nothing: the server asks ``solo`` every time,
    as before it remembered the answer per kind."""

    def get(self, key, default=None):  # type: ignore[override]
        return default

    def __setitem__(self, key, value) -> None:
        pass


def _program(seed: int, remember: bool) -> tuple[list[str], int, dict[str, int]]:
    """Random compute jobs, copy kernels and plain copies on one link (host memory
    binding at times): every finish (repr), the events queued, and how often ``solo``
    was asked per kind."""
    rng = random.Random(seed)
    env = simpy.Environment()
    link = PcieLink(toy_profile())
    link.host = rng.uniform(40e9, 90e9)
    asked: dict[str, int] = {}

    def solo(job: FluidJob, jobs: list[FluidJob]) -> float | None:
        asked[job.kind] = asked.get(job.kind, 0) + 1
        return link.solo_rate(job, jobs)

    server = FluidServer(env, link.allocate, solo=solo, shift=link.shift_rate)
    if not remember:
        server._solo_kinds = _Forgetful()
    out: list[str] = []

    random_jobs(env, server, rng, out, ["compute", "compute", "h2d", "d2h"], 30)
    env.run()
    return out, events_scheduled(env), asked


@pytest.mark.parametrize("seed", range(40))
def test_solo_asked_once_per_kind_finishes_every_job_as_asking_each_time(seed) -> None:
    """Remembering per kind whether ``solo`` gives a rate: the same finishes at the
    same times in the same order and the same events as asking at every join and
    finish; copies are asked once per kind, not at every join and leave."""
    out, events, asked = _program(seed, remember=True)
    plain_out, plain_events, plain_asked = _program(seed, remember=False)
    assert out == plain_out
    assert events == plain_events
    for kind in ("h2d", "d2h"):
        assert asked.get(kind, 0) <= 1
    assert asked.get("compute", 0) <= plain_asked.get("compute", 0)


def test_a_stale_timer_does_nothing_and_a_slowed_compute_job_keeps_its_timer() -> None:
    """A copy kernel slows a compute job after its timer was set: the kept timer fires
    at the old due, is queued again for the new one and finishes it there; an h2d copy
    re-planned by a second copy finishes once, at its re-planned due."""
    env = simpy.Environment()
    link = PcieLink(toy_profile())
    server = FluidServer(env, link.allocate, solo=link.solo_rate, shift=link.shift_rate)
    ends: dict[str, float] = {}
    c = FluidJob(1e-3, "compute")
    server.then_submit(c, lambda: ends.setdefault("c", env.now))
    k = FluidJob(5e6, "h2d", None, KERNEL)

    def kernel(_ev: object) -> None:
        server.then_submit(k, lambda: ends.setdefault("k", env.now))
    env.timeout(2e-4).callbacks.append(kernel)
    d = FluidJob(4e6, "d2h")
    finishes: list[float] = []
    server.then_submit(d, lambda: finishes.append(env.now))
    env.run()
    kernel_rate = link.kernel_rate
    slowed = k.work / kernel_rate  # the kernel's own time: c ran at 1 - slowdown then
    assert ends["k"] == pytest.approx(2e-4 + slowed)
    assert ends["c"] == pytest.approx(1e-3 + slowed * link.slowdown)
    assert len(finishes) == 1
    assert c.token >= 1 and c.due == c.timer_at == float("inf")
