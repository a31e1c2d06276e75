"""PCIe copies: per-call efficiency curve, calls pipelined on the copy engine, FIFO copy
engines, bidirectional sharing, copy kernels stealing SM time. Toy link: 50 GB/s H2D,
40 GB/s D2H, 60 GB/s both ways, 10 us per call, half efficiency at 100 kB (a call's fixed
cost: 10 us + 100 kB at the direction's peak)."""

from __future__ import annotations

import pytest
import simpy
from simtoys import toy_profile

from sim.copy_engine import CopyEngines
from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import HardwareProfile
from sim.link import PcieLink

OVERHEAD, HALF, H2D, D2H, BIDIR = 1e-5, 100_000, 50e9, 40e9, 60e9
MB = 1_000_000


def rig(profile: HardwareProfile, backend: str = "direct"):
    env = simpy.Environment()
    link = PcieLink(profile)
    fluid = FluidServer(env, link.allocate)
    return env, fluid, CopyEngines(env, profile, link, fluid, backend)


def run_copy(env, copies, direction, nbytes, calls=1, cap=None, out=None, key=None):
    def proc():
        result = yield from copies.copy(direction, nbytes, calls, cap)
        out[key] = (result[0], result[1])
    return env.process(proc())


@pytest.mark.parametrize("nbytes", [4096, 100_000, 8 * MB])
def test_a_lone_copy_takes_overhead_plus_bytes_over_rate_of_bytes(profile, nbytes) -> None:
    env, _, copies = rig(profile)
    out: dict = {}
    run_copy(env, copies, "h2d", nbytes, out=out, key=0)
    env.run()
    rate = H2D * nbytes / (nbytes + HALF)  # the efficiency curve
    assert out[0][1] == pytest.approx(OVERHEAD + nbytes / rate, rel=1e-12)
    assert out[0][1] == pytest.approx(profile.pcie.lone_copy_time(nbytes), rel=1e-12)
    assert copies.link.moved == {"h2d": nbytes, "d2h": 0}


def fixed(direction: str = "h2d") -> float:
    """One call's fixed cost: its overhead and half-efficiency bytes at the peak."""
    return OVERHEAD + HALF / (H2D if direction == "h2d" else D2H)


def test_a_copy_of_half_efficiency_bytes_runs_at_half_the_link_rate(profile) -> None:
    env, _, copies = rig(profile)
    out: dict = {}
    run_copy(env, copies, "h2d", HALF, out=out, key=0)
    env.run()
    start, end = out[0]
    assert start == pytest.approx(fixed())  # the call's fixed cost comes first
    assert HALF / (end - OVERHEAD) == pytest.approx(H2D / 2)


def test_same_direction_copies_from_two_streams_run_in_fifo_order(profile) -> None:
    """A small copy submitted after a big one waits for it (stream priority is ignored)."""
    env, _, copies = rig(profile)
    out: dict = {}
    run_copy(env, copies, "h2d", 64 * MB, out=out, key="big")
    run_copy(env, copies, "h2d", 4096, out=out, key="small")
    env.run()
    big = profile.pcie.lone_copy_time(64 * MB)
    assert out["big"][1] == pytest.approx(big)
    assert out["small"][1] == pytest.approx(big + profile.pcie.lone_copy_time(4096))


def test_opposite_directions_overlap_but_share_the_bidirectional_cap(profile) -> None:
    env, _, copies = rig(profile)
    out: dict = {}
    n = 30 * MB
    run_copy(env, copies, "h2d", n, out=out, key="h2d")
    run_copy(env, copies, "d2h", n, out=out, key="d2h")
    env.run()
    scale = BIDIR / (H2D + D2H)  # both busy: 50 + 40 > 60, scaled to 33.3 + 26.7
    t_h, t_d = fixed("h2d"), fixed("d2h")  # each call's fixed cost first; h2d starts first
    h2d_left = n - H2D * (t_d - t_h)
    h2d_end = t_d + h2d_left / (H2D * scale)
    d2h_left = n - D2H * scale * (h2d_end - t_d)
    assert out["h2d"][1] == pytest.approx(h2d_end, rel=1e-9)
    assert out["d2h"][1] == pytest.approx(h2d_end + d2h_left / D2H, rel=1e-9)
    serial = profile.pcie.lone_copy_time(n) + profile.pcie.lone_copy_time(n, "d2h")
    assert max(out["h2d"][1], out["d2h"][1]) < serial  # they did overlap


def test_host_memory_bandwidth_caps_pcie_traffic() -> None:
    env, _, copies = rig(toy_profile(host={"memory_bytes_per_s": 20e9}))
    out: dict = {}
    run_copy(env, copies, "h2d", 10 * MB, out=out, key=0)
    env.run()
    assert out[0][1] == pytest.approx(fixed() + 10 * MB / 20e9)


def test_a_throttled_copy_runs_at_its_cap(profile) -> None:
    env, _, copies = rig(profile)
    out: dict = {}
    run_copy(env, copies, "d2h", 10 * MB, cap=5e9, out=out, key=0)
    env.run()
    assert out[0][1] == pytest.approx(fixed("d2h") + 10 * MB / 5e9)


@pytest.mark.parametrize("nbytes", [64_000, 10 * MB])
def test_the_engine_sets_up_each_call_while_the_previous_one_moves(profile, nbytes) -> None:
    """n calls of b bytes take c + max(n b / rate, (n - 1) c + b / rate): submission-bound
    when calls are small, bandwidth-bound when they are large (a two-stage flow shop)."""
    env, _, copies = rig(profile)
    out: dict = {}
    run_copy(env, copies, "h2d", nbytes, calls=8, out=out, key=0)
    env.run()
    c = fixed()
    want = c + max(nbytes / H2D, 7 * c + nbytes / 8 / H2D)
    assert out[0][1] == pytest.approx(want)
    serial = 8 * OVERHEAD + (nbytes + 8 * HALF) / H2D  # the calls one after another
    assert out[0][1] < serial
    if nbytes == 64_000:  # small calls: the setups bound it
        assert out[0][1] == pytest.approx(8 * c + nbytes / 8 / H2D)


def test_calls_run_in_series_without_pipelining(profile) -> None:
    """Ablation ``pipelined_issue`` (and the CPU runtime, whose lane thread does each
    call's work itself): every call's fixed cost, then the bytes."""
    from simtoys import TOY_PROFILE

    from sim.hardware.profile import load_profile

    env, _, copies = rig(load_profile({**TOY_PROFILE, "ablate": ["pipelined_issue"]}))
    out: dict = {}
    run_copy(env, copies, "h2d", 10 * MB, calls=8, out=out, key=0)
    env.run()
    assert out[0][1] == pytest.approx(8 * OVERHEAD + (10 * MB + 8 * HALF) / H2D)


def test_copy_kernels_run_at_the_kernel_rate_and_slow_concurrent_compute(profile) -> None:
    env, fluid, copies = rig(profile, backend="kernel")
    out: dict = {}
    n = 10 * MB
    run_copy(env, copies, "h2d", n, calls=99, out=out, key="copy")  # one launch, not 99

    def compute():
        yield from fluid.run(FluidJob(1e-3, "compute"))
        out["compute"] = env.now
    env.process(compute())
    env.run()
    copy_time = n / 25e9  # io_kernel.bytes_per_s < link rate; no small-copy penalty
    assert out["copy"][1] == pytest.approx(OVERHEAD + copy_time)
    # compute ran at 90% while the kernel held SMs, full speed after
    assert out["compute"] == pytest.approx(1e-3 + 0.1 * copy_time, rel=1e-9)


def test_unknown_backend_is_rejected(profile) -> None:
    with pytest.raises(ValueError, match="io_backend"):
        rig(profile, backend="magic")


def test_measured_copy_tables_replace_the_analytic_link_curve() -> None:
    """A calibrated profile: a lone copy then follows the measured line t = c + B / rate."""
    from simtoys import TOY_PROFILE

    from sim.calibration import apply_copy_calibration
    from sim.hardware.profile import load_profile

    line = [[b, 30e-6 + b / 20e9] for b in (1e5, 1e6, 1e7)]  # 30 us + B / 20 GB/s
    data = {**TOY_PROFILE, "calibrated": {"device": "cuda", "copy": {"h2d": line, "d2h": line}}}
    calibrated = apply_copy_calibration(load_profile(data))
    for nbytes in (4096, 5 * MB):
        assert calibrated.pcie.lone_copy_time(nbytes) == pytest.approx(30e-6 + nbytes / 20e9)
    assert apply_copy_calibration(load_profile(TOY_PROFILE)).pcie.h2d_bytes_per_s == H2D


def _job_mix(rng, profile) -> list[FluidJob]:
    """A random mix of copies (some copy kernels, some capped), L3-free."""
    jobs = []
    for _ in range(rng.randrange(0, 5)):
        direction = rng.choice(["h2d", "d2h"])
        tags = frozenset({"kernel"}) if rng.random() < 0.4 else frozenset()
        cap = rng.choice([None, 5e9, 30e9])
        jobs.append(FluidJob(MB, direction, cap, tags))
    return jobs


@pytest.mark.parametrize("seed", range(20))
def test_a_compute_job_joining_or_leaving_changes_no_other_rate(profile, seed) -> None:
    """What lets the fluid server skip re-allocating for compute jobs (solo_rate): after a
    compute job joins, allocate gives every other job the rate it had, and the compute job
    the rate solo_rate names; after it leaves, the others keep their rates too."""
    import random
    rng = random.Random(seed)
    link = PcieLink(profile)
    link.slowdown = 0.25  # copy kernels slow compute (the toy profile may not)
    jobs = _job_mix(rng, profile)
    if rng.random() < 0.5:
        jobs.append(FluidJob(1.0, "compute"))  # a compute job already running
    link.allocate(jobs)
    before = [j.rate for j in jobs]
    job = FluidJob(0.01, "compute")
    solo = link.solo_rate(job, [*jobs, job])
    link.allocate([*jobs, job])
    assert [j.rate for j in jobs] == before
    assert job.rate == solo
    kernels = any("kernel" in j.tags for j in jobs if j.kind != "compute")
    assert solo == (0.75 if kernels else 1.0)
    link.allocate(jobs)  # it left
    assert [j.rate for j in jobs] == before
    assert link.solo_rate(FluidJob(1.0, "h2d"), jobs) is None  # a copy takes a share


def test_a_fluid_server_with_solo_rates_finishes_jobs_when_full_replans_do(profile) -> None:
    """The same jobs on two servers, one re-allocating on every change, one sparing it for
    compute jobs: every job ends at the same float time."""
    ends = []
    for solo in (False, True):
        env = simpy.Environment()
        link = PcieLink(profile)
        link.slowdown = 0.3
        fluid = FluidServer(env, link.allocate, solo=link.solo_rate if solo else None)
        out: dict = {}

        def start(at, job, key, fluid=fluid, env=env, out=out):
            def proc():
                yield env.timeout(at)
                yield fluid.submit(job)
                out[key] = env.now
            env.process(proc())
        start(0.0, FluidJob(3 * MB, "h2d", tags=frozenset({"kernel"})), "k")
        start(1e-5, FluidJob(2e-4, "compute"), "c1")
        start(3e-5, FluidJob(MB, "d2h"), "d")
        start(5e-4, FluidJob(1e-4, "compute"), "c2")
        env.run()
        ends.append(out)
    assert ends[0] == ends[1]
    assert ends[0]["c1"] > 2e-4 + 1e-5  # slowed by the copy kernel: the rates mattered
