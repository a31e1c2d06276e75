"""Toy profile and model with round numbers, so closed forms in the tests are easy."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import simpy

from hicache.runtime.handles import CacheExtentRef
from hicache.runtime.interface import BackupIntent, BatchPlan, Phase, Release, RequestSlice
from sim.fluid import FluidJob, FluidServer
from sim.hardware.model import ModelPreset, load_model
from sim.hardware.profile import HardwareProfile, load_profile
from sim.runtime import SimRuntime

KERNEL = frozenset({"kernel"})  # a copy kernel's tags (sim.load_chain)

TOY_PROFILE: dict[str, Any] = {
    "name": "toy",
    "gpu": {"bf16_flops": 1.0e15, "matmul_efficiency": 0.5, "hbm_bytes_per_s": 2.0e12,
            "kernel_launch_s": 0.0},
    "pcie": {"h2d_bytes_per_s": 50.0e9, "d2h_bytes_per_s": 40.0e9,
             "bidirectional_bytes_per_s": 60.0e9, "call_overhead_s": 1.0e-5,
             "half_efficiency_bytes": 100_000, "copy_engines": 3},
    "io_kernel": {"bytes_per_s": 25.0e9, "compute_slowdown": 0.1},
    "host": {"memory_bytes_per_s": 1.0e12},
    "cpu": {"scheduler_step_s": 1.0e-4},
    "l3": {"mooncake": {"master_rpc_s": 1.0e-3, "latency_s": 1.0e-4, "capacity_bytes": 1.0e12,
                        "nic_bytes_per_s": 10.0e9, "node_bytes_per_s": 40.0e9, "nodes": 2},
           "file": {"read_bytes_per_s": 5.0e9, "write_bytes_per_s": 2.0e9, "latency_s": 1.0e-4,
                    "capacity_bytes": 1.0e12}},
}

TOY_MODEL: dict[str, Any] = {
    "name": "toy-4l", "num_layers": 4, "num_heads": 8, "num_kv_heads": 2, "head_dim": 128,
    "hidden_size": 1024, "ffn_size": 4096, "dtype_bytes": 2, "tensor_parallel": 1,
    "layers": "full", "sliding_window": 256, "mamba_state_bytes": 0,
}


def toy_profile(**overrides: dict[str, Any]) -> HardwareProfile:
    data = copy.deepcopy(TOY_PROFILE)
    for section, values in overrides.items():
        data[section].update(values)
    return load_profile(data)


def toy_model(**overrides: Any) -> ModelPreset:
    return load_model({**TOY_MODEL, **overrides})


def make_runtime(env: simpy.Environment, profile: HardwareProfile, model: ModelPreset,
                 **kw: Any) -> SimRuntime:
    args: dict[str, Any] = {"page_size": 16, "device_pages": {"full": 1024},
                            "host_pages": {"full": 1024}, "io_backend": "direct"}
    args.update(kw)
    return SimRuntime(env, profile=profile, model=model, **args)


def host_copy_of_prefill(rt: SimRuntime, env: simpy.Environment, rid: int, tokens: int,
                         batch_id: int) -> CacheExtentRef:
    """Prefill ``tokens`` for request ``rid``, back its pages up to host, close its row and
    free its device pages: returns the host extent (what a later hit would load)."""
    plan = BatchPlan(batch_id, slices=(RequestSlice(rid, Phase.PREFILL, 0, tokens),))
    h = rt.prepare_batch(plan)
    rt.execute_batch(h)
    env.run()
    kv, request = h.slices[0].kv, h.slices[0].request
    h = rt.prepare_batch(BatchPlan(batch_id + 1, backups=(BackupIntent(kv, job_id=batch_id),)))
    rt.execute_batch(h)
    env.run()
    host = h.backups[0]
    h = rt.prepare_batch(BatchPlan(batch_id + 2, releases=(Release(request),)))
    rt.execute_batch(h)
    env.run()
    rt.poll()
    return host



def layer_pipeline(env: simpy.Environment, fluid: FluidServer, slowdown: float,
                   loads: list[float], work: list[float], overhead: float, out: list[str],
                   label: str = "") -> tuple[dict[str, int], Callable[[int], None]]:
    """A batch's layers as sim.load_chain and sim.compute_chain run them: copy kernel
    ``i`` (``loads[i]`` bytes) launched ``overhead`` after kernel ``i - 1`` moved its
    bytes (the launch promised to compute at ``1 - slowdown``), compute layer ``i``
    (``work[i]`` seconds) after layer ``i - 1`` and kernel ``i``. Each finish appends
    ``"{label}h2d i now"`` or ``"{label}compute i now"`` to ``out``. Returns the state
    (``next``: layers computed) and ``launch``: call ``launch(0)`` to start."""
    n = len(loads)
    state = {"landed": 0, "next": 0, "busy": False}

    def compute_next() -> None:
        i = state["next"]
        if state["busy"] or i >= n or i >= state["landed"]:
            return
        state["busy"] = True

        def done() -> None:
            out.append(f"{label}compute {i} {env.now!r}")
            state["busy"], state["next"] = False, i + 1
            compute_next()
        fluid.then_submit(FluidJob(work[i], "compute"), done)

    def launch(i: int) -> None:
        fluid.kept()

        def moved() -> None:
            out.append(f"{label}h2d {i} {env.now!r}")
            if i + 1 < n:
                fluid.promise(env.now + overhead, 1.0 - slowdown)
            state["landed"] = i + 1
            compute_next()
            if i + 1 < n:
                env.timeout(overhead).callbacks.append(lambda _ev: launch(i + 1))
        fluid.then_submit(FluidJob(loads[i], "h2d", None, KERNEL), moved)

    return state, launch


def submit_at(env: simpy.Environment, fluid: FluidServer, at: float, job: FluidJob,
              name: str, out: list[str]) -> None:
    """Submit ``job`` to ``fluid`` at time ``at``; its finish appends ``"{name} now"``."""
    def go(_ev: object) -> None:
        fluid.then_submit(job, lambda: out.append(f"{name} {env.now!r}"))
    env.timeout(at).callbacks.append(go)


def random_jobs(env: simpy.Environment, fluid: FluidServer, rng: random.Random,
                out: list[str], kinds: list[str], most: int,
                compute: Callable[[float, str], FluidJob] = FluidJob) -> None:
    """4 to ``most`` jobs of ``kinds`` at random times in the first 2 ms (:func:`submit_at`,
    named kind and index): compute jobs built by ``compute``, copies of 0.1-20 MB, 60% of
    them copy kernels."""
    for i in range(rng.randint(4, most)):
        kind = rng.choice(kinds)
        at = rng.uniform(0.0, 2e-3)
        if kind == "compute":
            job = compute(rng.uniform(1e-5, 4e-4), "compute")
        else:
            job = FluidJob(rng.uniform(1e5, 2e7), kind, None,
                           KERNEL if rng.random() < 0.6 else frozenset())
        submit_at(env, fluid, at, job, f"{kind}{i}", out)


def side_traffic(env: simpy.Environment, fluid: FluidServer, rng: random.Random,
                 out: list[str]) -> None:
    """Up to six L3 transfers and d2h copy kernels at random times in the first 2 ms
    (beside a :func:`layer_pipeline`); each finish appends ``"{kind} at now"``."""
    def other(kind: str, at: float, nbytes: float) -> None:
        def go(_ev: object) -> None:
            tags = KERNEL if kind == "d2h" else frozenset()
            fluid.submit(FluidJob(nbytes, kind, None, tags)).callbacks.append(
                lambda _e: out.append(f"{kind} {at!r} {env.now!r}"))
        env.timeout(at).callbacks.append(go)

    for _ in range(rng.randint(0, 6)):
        other(rng.choice(["l3", "l3", "d2h"]), rng.uniform(0, 2e-3), rng.uniform(1e5, 3e7))


def split_pages(pages: list[int], cuts: set[int] | list[int] = ()) -> list[tuple[int, int]]:
    """``pages`` as (first, count) runs, cut wherever they are not consecutive and before
    each index in ``cuts`` too (runs need not be coalesced)."""
    out: list[tuple[int, int]] = []
    for i, p in enumerate(pages):
        if out and out[-1][0] + out[-1][1] == p and i not in cuts:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def twin_run_events_saved(monkeypatch: Any, module: Any, flag: str, name: str,
                          variant: str | None, overrides: list[str]) -> int:
    """Simulate ``scenarios/<name>`` (every variant, or only ``variant``) with the shortcut
    ``module.<flag>`` off and on; assert the runs equal (records, timeline rows, simulated
    time, decisions, fault costs) and return the SimPy events the shortcut saved."""
    from hicache.scenario import load_scenario
    from sim.driver import simulate

    saved = 0
    for vname, vsc in load_scenario(f"scenarios/{name}", overrides).expand():
        if variant is not None and vname != variant:
            continue
        runs = {}
        for on in (False, True):
            monkeypatch.setattr(module, flag, on)
            res = simulate(vsc, name=vname, progress=False)
            rows = [repr(sorted(rep.timeline.as_tuples())) for rep in res.replicas]
            faults = [c.counts for c in res.faults.costs] if res.faults else None
            runs[on] = ((repr(res.records), rows, repr(res.sim_time), repr(res.decisions),
                         repr(faults)), res.events)
        assert runs[True][0] == runs[False][0], vname
        saved += runs[False][1] - runs[True][1]
    return saved
