"""Kept timers (sim.fluid ``KEEP``): a PCIe or L3 job re-planned to finish no earlier than
its live timer fires keeps that timer, which moves, when it fires, to the very queue entry
(time and id) the re-plan's new timer would have had. Twinned against a new timer per
re-plan: every event that does something is the same event at the same place (time,
priority, id) in the same order, every finish bit for bit, with fewer events processed."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import simpy
from simtoys import random_jobs, toy_profile

import sim.fluid as fluid_module
from hicache.scenario import load_scenario
from sim.driver import simulate
from sim.fluid import FluidJob, FluidServer, _Timer
from sim.link import PcieLink
from sim.streams import call_at
from tests.shared_data import CONVERSATION_TRACE, skip_reason


def _run(env: simpy.Environment) -> tuple[list[tuple], int]:
    """Step ``env`` to its end: the queue entries of the events that did something (a
    fluid timer that finished its job, every other event) in order, and how many events
    were processed in all (stale timers and kept timers moving on included)."""
    done: list[tuple] = []
    processed = 0
    while env._queue:  # type: ignore[attr-defined]
        at, prio, eid, ev = env._queue[0]  # type: ignore[attr-defined]
        processed += 1
        if isinstance(ev, _Timer):
            job, token = ev.job, ev.token
            live = token == job.token
            env.step()
            if live and job.token != token:  # it finished its job (not: moved on)
                done.append((at, prio, eid, "finish"))
            continue
        env.step()
        done.append((at, prio, eid))
    return done, processed


def _equal_split(jobs: list[FluidJob]) -> None:
    """Every job an equal share of one unit of bandwidth (an L3 split: each join or
    leave changes every rate)."""
    for job in jobs:
        job.rate = 1.0 / len(jobs)


def _split_program(seed: int, keep: bool, monkeypatch: pytest.MonkeyPatch
                   ) -> tuple[list[str], list[tuple], int]:
    """L3-like transfers on an equal split: joins at a few instants (several at one
    time: re-plans whose timers the next join at that time replaces), some of equal size
    (equal finishes: their order is the queue's), and at each join a probe queued at a
    running job's due (after the re-plan: it must come after that job's finish)."""
    monkeypatch.setattr(fluid_module, "KEEP", keep)
    rng = random.Random(seed)
    env = simpy.Environment()
    server = FluidServer(env, _equal_split)
    out: list[str] = []
    instants = [rng.choice([0.0, 0.25, 0.5, 1.0, 1.5]) for _ in range(rng.randint(3, 12))]
    sizes = [rng.choice([0.5, 1.0, rng.uniform(0.1, 2.0)]) for _ in instants]

    def join(i: int) -> None:
        def go(_ev: object) -> None:
            server.then_submit(FluidJob(sizes[i], "l3"),
                               lambda: out.append(f"l3-{i} {env.now!r}"))
            running = [j for j in server.jobs if j.due < math.inf]
            if running:
                job = rng.choice(running)
                call_at(env, job.due, lambda _e: out.append(f"probe-{i} {env.now!r}"))
        env.timeout(instants[i]).callbacks.append(go)

    for i in range(len(instants)):
        join(i)
    done, processed = _run(env)
    return out, done, processed


def _link_program(seed: int, keep: bool, monkeypatch: pytest.MonkeyPatch
                  ) -> tuple[list[str], list[tuple], int]:
    """Compute jobs, copy kernels and plain copies both ways on one PCIe link (the
    bidirectional cap slows a d2h copy when an h2d one joins; host memory binds at
    times)."""
    monkeypatch.setattr(fluid_module, "KEEP", keep)
    rng = random.Random(seed)
    env = simpy.Environment()
    link = PcieLink(toy_profile())
    link.host = rng.uniform(40e9, 90e9)
    server = FluidServer(env, link.allocate, solo=link.solo_rate, shift=link.shift_rate)
    out: list[str] = []
    random_jobs(env, server, rng, out, ["compute", "h2d", "d2h", "d2h", "h2d"], 30)
    done, processed = _run(env)
    return out, done, processed


@pytest.mark.parametrize("program", [_split_program, _link_program])
def test_kept_timers_leave_every_event_in_its_place(program, monkeypatch) -> None:
    processed = {False: 0, True: 0}
    for seed in range(80):
        plain_out, plain_done, plain_n = program(seed, False, monkeypatch)
        out, done, n = program(seed, True, monkeypatch)
        assert out == plain_out, seed
        assert done == plain_done, seed
        assert n <= plain_n, seed
        processed[False] += plain_n
        processed[True] += n
    assert processed[True] < 0.95 * processed[False]


def _slowed_twice(keep: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], int]:
    """A transfer running alone; two more join it at 0.5 s, and a probe is queued then at
    its due: the finishes and probe (in order), and the events processed."""
    monkeypatch.setattr(fluid_module, "KEEP", keep)
    env = simpy.Environment()
    server = FluidServer(env, _equal_split)
    out: list[str] = []
    a = FluidJob(1.0, "l3")
    server.then_submit(a, lambda: out.append(f"a {env.now!r}"))

    def joins(_ev: object) -> None:
        for name in ("b", "c"):
            server.then_submit(FluidJob(2.0, "l3"),
                               lambda n=name: out.append(f"{n} {env.now!r}"))
        call_at(env, a.due, lambda _e: out.append(f"probe {env.now!r}"))
    env.timeout(0.5).callbacks.append(joins)
    _done, processed = _run(env)
    return out, processed


@pytest.mark.parametrize("keep", [False, True])
def test_a_job_slowed_twice_at_once_keeps_one_timer(keep, monkeypatch) -> None:
    """Two transfers join a running one at one instant: it is re-planned twice but keeps
    its timer (no timer per re-plan), which moves on once and finishes it where a new
    timer would, before the probe queued after the re-plans at that very time."""
    out, processed = _slowed_twice(keep, monkeypatch)
    # a: 0.5 s alone, then 0.5 at 1/3: 1.5 s more; b and c: 0.5 at 1/3, 1.5 at 1/2
    assert out == ["a 2.0", "probe 2.0", "b 5.0", "c 5.0"]
    # the 0.5 s timeout, the probe and the timers: plain, a new one per re-plan (a:
    # its first and one per join; b and c: their first and one per finish before
    # theirs: 3 each); kept, a's first moving on once, b's first moving on once (it
    # finishes no earlier at c's join and a's finish), c's first, a new one when a's
    # finish speeds it up and that one moving on at b's finish
    assert processed == (9 if keep else 11)


ROOT = Path(__file__).resolve().parents[2]
TRACE = CONVERSATION_TRACE


@pytest.mark.parametrize("case", ["multiturn", "trace"])
def test_a_run_with_kept_timers_is_the_run_with_a_timer_per_re_plan(case, monkeypatch
                                                                     ) -> None:
    """L3 transfers, write-back copies and layer-wise loads (folded chains absorbing L3
    changes included): the same records, timelines and end, the same events queued (a
    kept timer's re-plan takes the id a new timer takes), fewer fluid timers fired."""
    if case == "trace":
        if not TRACE.exists():
            pytest.skip(skip_reason(TRACE))
        sc = load_scenario(ROOT / "scenarios" / "mooncake_trace.yaml",
                           ["workload.max_requests=300", "run.layerwise=true",
                            f"workload.path={TRACE}"])
    else:
        sc = load_scenario(ROOT / "scenarios" / "multiturn_tiers.yaml",
                           ["workload.num_clients=16", "workload.num_rounds=6",
                            "run.layerwise=true", "cache.device_tokens=20000",
                            "cache.hicache_ratio=1.5"])
    vsc = dict(sc.expand())["L1+L2+L3"]
    fired = {False: 0, True: 0}
    fire = FluidServer._fire
    runs = {}
    for keep in (False, True):
        monkeypatch.setattr(fluid_module, "KEEP", keep)

        def counted(self: FluidServer, timer: _Timer, keep: bool = keep) -> None:
            fired[keep] += 1
            fire(self, timer)
        monkeypatch.setattr(FluidServer, "_fire", counted)
        res = simulate(vsc, name="keep", progress=False)
        runs[keep] = (repr(res.records), repr(res.decisions), repr(res.sim_time),
                      [repr(rep.timeline.as_tuples()) for rep in res.replicas], res.events)
    assert runs[True] == runs[False]
    assert fired[True] < fired[False]
