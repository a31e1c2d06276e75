"""Calibrate ``cpu.scheduler_step_s``: the control plane's CPU time per scheduler step.

Runs a short representative scenario (multi-turn chat over L1+L2 with evictions, loads
and backups, one batch in flight) through :func:`gpu_backend.driver.run_scenario` on the
calibration's device and shape, and takes the median wall time of the driver's steps that
submitted work. That is what the simulator charges: ``sim.driver`` waits
``scheduler_step_s`` after every loop iteration that produced plans, and a driver step is
``Scheduler.step`` until it returns no plan, plus ``prepare_batch``/``execute_batch`` of
each plan (their submission cost is CPU time on the same thread). Invariant: the result
is the median of at least ``min_steps`` timed steps, else ValueError.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from gpu_backend.shapes import ModelShape

SCENARIO: dict[str, Any] = {
    "name": "scheduler_step_calibration", "seed": 11,
    "cache": {"page_size": 16, "device_tokens": 512, "enable_hierarchical_cache": True,
              "hicache_ratio": 4.0, "hicache_write_policy": "write_through",
              "hicache_storage_prefetch_policy": "wait_complete",
              "hicache_io_backend": "direct", "load_back_threshold": 4},
    "scheduler": {"overlap": False, "max_running_requests": 2, "chunked_prefill_size": 256},
    "workload": {"kind": "multiturn", "num_clients": 6, "num_rounds": 3,
                 "request_length": [32, 64], "output_length": [4, 8],
                 "request_rate": math.inf, "max_parallel": 6, "system_prompt_length": 16},
}


@dataclass(frozen=True)
class StepTiming:
    median_s: float  # median over the steps that submitted a plan (the calibrated value)
    all_median_s: float  # median over every step, idle ones included
    steps: int  # steps that submitted a plan
    total_steps: int


def measure_scheduler_step(shape: ModelShape, device: str = "cpu", page_size: int = 16,
                           *, repeats: int = 2, min_steps: int = 20) -> StepTiming:
    """Run :data:`SCENARIO` ``repeats`` times; pool the step times of all runs."""
    from gpu_backend.driver import run_scenario

    d = {**SCENARIO, "cache": {**SCENARIO["cache"], "page_size": page_size}}
    work: list[float] = []
    every: list[float] = []
    for _ in range(repeats):
        res = run_scenario(dict(d), device=device, shape=shape, name="scheduler-step")
        work += res.extra["work_step_s"]
        every += res.extra["step_s"]
    if len(work) < min_steps:
        raise ValueError(f"scheduler-step calibration timed {len(work)} working steps, "
                         f"need {min_steps}")
    return StepTiming(statistics.median(work), statistics.median(every), len(work), len(every))
