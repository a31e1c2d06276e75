"""A tiny hybrid model, a scheduler that tracks its components, and a loop that drives them.

Pages of 4 tokens; the model has one full, one sliding-window and one mamba layer (or the
subset a test asks for). ``drive`` feeds requests at their arrival times, lets each step's
plans run on the simulated GPU and returns when everything finished and was released.
"""

from __future__ import annotations

from typing import Any

import simpy

from hicache.config import CacheConfig
from hicache.runtime.handles import Kind
from hicache.scheduler.scheduler import Scheduler, SchedulerConfig
from hicache.workload.request import Request
from sim.hardware.model import ModelPreset, load_model
from sim.runtime import SimRuntime

PAGE = 4


def tiny_model(layers: tuple[str, ...] = ("full", "swa", "mamba"), window: int = 8
               ) -> ModelPreset:
    return load_model({
        "name": "tiny-hybrid", "num_layers": len(layers), "num_heads": 4, "num_kv_heads": 2,
        "head_dim": 16, "hidden_size": 64, "ffn_size": 128, "dtype_bytes": 2,
        "layers": list(layers), "sliding_window": window, "mamba_state_bytes": 4096})


def tiny_system(model: ModelPreset, *, full: int = 256, swa: int = 256, mamba: int = 64,
                max_running: int = 1, overlap: bool = True, track: bool = True,
                **cache: Any) -> tuple[simpy.Environment, SimRuntime, Scheduler]:
    env = simpy.Environment()
    pools = {Kind.FULL: full}
    if track and "swa" in model.component_kinds:
        pools[Kind.SWA] = swa
    if track and "mamba" in model.layer_kinds:
        pools[Kind.MAMBA] = mamba
    rt = SimRuntime(env, profile="h100-sxm", model=model, page_size=PAGE, device_pages=pools,
                    host_pages={Kind.FULL: 0})
    cfg = SchedulerConfig(max_running_requests=max_running, chunked_prefill_size=64,
                          overlap=overlap, track_components=track)
    sched = Scheduler(CacheConfig(page_size=PAGE, device_tokens=full * PAGE, **cache),
                      rt.info(), cfg)
    return env, rt, sched


def drive(env: simpy.Environment, rt: SimRuntime, sched: Scheduler,
          requests: list[Request]) -> None:
    pending = sorted(requests, key=lambda r: (r.arrival, r.rid))

    def loop():  # noqa: ANN202 - a simpy process
        while True:
            arrivals = [r for r in pending if r.arrival <= env.now]
            del pending[:len(arrivals)]
            plans = sched.step(env.now, arrivals, rt.poll()).plans
            while plans:
                for plan in plans:
                    handle = rt.prepare_batch(plan)
                    sched.prepared(handle)
                    rt.execute_batch(handle)
                plans = sched.step(env.now).plans
            if sched.idle and not pending:
                return
            waits = [rt.completion_event()]
            if pending:
                waits.append(env.timeout(pending[0].arrival - env.now))
            yield env.any_of(waits)

    env.process(loop())
    env.run()


def one_at_a_time(*prompts: list[int], output_len: int = 3) -> list[Request]:
    """Requests spaced far enough apart that each finishes before the next arrives."""
    return [Request(i, 10.0 * i, p, output_len) for i, p in enumerate(prompts)]


def hits(sched: Scheduler) -> list[int]:
    return [r["device_hit"] for r in sched.records()]
