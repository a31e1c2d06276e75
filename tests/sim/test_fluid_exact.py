"""The fluid server's exactness aids for speed (sim.fluid): expected changes and adoption
with recorded marks give the very floats a run with the real jobs gives; a compute job's
kept timer finishes it when a fresh timer would have; chained stream ops start in order."""

from __future__ import annotations

import simpy

from sim.fluid import FluidJob, FluidServer
from sim.streams import Stream


def _share(jobs: list[FluidJob]) -> None:
    """Non-compute jobs share rate 1/3 equally; compute runs at 1.0 (a solo rate)."""
    movers = [j for j in jobs if j.kind != "compute"]
    for j in jobs:
        j.rate = 1.0 if j.kind == "compute" else (1 / 3) / len(movers)


def _solo(job: FluidJob, jobs: list[FluidJob]) -> float | None:
    return 1.0 if job.kind == "compute" else None


def _server(env: simpy.Environment) -> FluidServer:
    return FluidServer(env, _share, solo=_solo)


def _at(env: simpy.Environment, t: float, fn) -> None:
    env.timeout(t - env.now).callbacks.append(lambda _ev: fn())


def _transfer_finish(compute: bool, expect: bool) -> tuple[float, float]:
    """A transfer X from 0; a compute job from 0.1 to 0.3 (real, or only expected); Y
    joins at 0.41 (X re-planned from its remaining work). Returns (X's finish, X's
    remaining when Y joined)."""
    env = simpy.Environment()
    fluid = _server(env)
    x = FluidJob(1.0, "l3")
    out: dict[str, float] = {}
    fluid.submit(x).callbacks.append(lambda _ev: out.setdefault("x", env.now))
    if compute:
        _at(env, 0.1, lambda: fluid.submit(FluidJob(0.2, "compute")))
    if expect:
        fluid.expect([0.1, 0.1 + 0.2])

    def join() -> None:
        fluid.submit(FluidJob(0.7, "l3"))
        out["rem"] = x.remaining
    _at(env, 0.41, join)
    env.run()
    return out["x"], out["rem"]


def test_expected_changes_charge_a_transfer_as_the_real_compute_job_does() -> None:
    real = _transfer_finish(compute=True, expect=False)
    assert _transfer_finish(compute=False, expect=True) == real  # bit for bit
    # the splits matter: without them the floats differ (so the check above can fail)
    assert _transfer_finish(compute=False, expect=False)[1] != real[1]


def _adopted(real: bool) -> tuple[float, float, float]:
    """X moves from 0; compute job C starts at 0.1 (work 0.5); Y joins at 0.23 and ends;
    at 0.31 C is either still the real job or adopted from 0.1 with the recorded marks;
    Z joins at 0.45 (an allocation over all). Returns C's remaining then, X's, C's end."""
    env = simpy.Environment()
    fluid = _server(env)
    x = FluidJob(3.0, "l3")
    fluid.submit(x)
    c = FluidJob(0.5, "compute")
    out: dict[str, float] = {}
    if real:
        _at(env, 0.1, lambda: fluid.submit(c).callbacks.append(
            lambda _ev: out.setdefault("c", env.now)))
    else:
        fluid.expect([0.1])
    _at(env, 0.23, lambda: fluid.submit(FluidJob(0.01, "l3")))
    if not real:
        def adopt() -> None:
            marks = fluid.unexpect(0.31)
            fluid.adopt(c, 0.1, marks).callbacks.append(
                lambda _ev: out.setdefault("c", env.now))
        _at(env, 0.31, adopt)

    def join() -> None:
        fluid.submit(FluidJob(0.2, "l3"))
        out["c_rem"], out["x_rem"] = c.remaining, x.remaining
    _at(env, 0.45, join)
    env.run()
    return out["c_rem"], out["x_rem"], out["c"]


def test_adopted_job_is_charged_at_each_recorded_change() -> None:
    assert _adopted(real=False) == _adopted(real=True)


def test_compute_job_slowed_and_sped_up_finishes_at_its_exact_time() -> None:
    """A compute job at 1.0, slowed to 0.5 by a kernel and back: its kept timer fires
    early and re-arms, finishing exactly where the rates put it."""
    env = simpy.Environment()

    def alloc(jobs: list[FluidJob]) -> None:
        kernel = any(j.kind == "h2d" for j in jobs)
        for j in jobs:
            j.rate = (0.5 if kernel else 1.0) if j.kind == "compute" else 1.0
    fluid = FluidServer(env, alloc)
    c = FluidJob(1.0, "compute")
    ends: list[float] = []
    fluid.submit(c).callbacks.append(lambda _ev: ends.append(env.now))
    _at(env, 0.25, lambda: fluid.submit(FluidJob(0.5, "h2d")))
    env.run()
    # 0.25 at full speed, 0.5 s at half speed (0.25 work), then 0.5 work at full speed
    assert ends == [0.25 + 0.5 + 0.5]


def test_chained_stream_ops_start_after_the_op_before_and_set_the_tail() -> None:
    env = simpy.Environment()
    stream = Stream(env, "h2d")
    log: list[tuple[str, float]] = []

    def body():
        yield env.timeout(2)
        log.append(("process", env.now))
    first = stream.submit(body)
    done = env.event()

    def start(_ev: object) -> None:
        log.append(("chain starts", env.now))
        env.timeout(1).callbacks.append(lambda _e: done.succeed())
    assert stream.submit_chain(start, done) is done
    assert stream.tail is done and not first.processed
    env.run()
    assert log == [("process", 2), ("chain starts", 2)]
    assert done.processed and stream.idle()
