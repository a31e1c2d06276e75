"""In-situ calibration: what the microbenchmarks miss when the runtime runs a real loop.

Microbenchmarks repeat one op back to back (hot caches, hot interpreter); the serving
loop runs each op once, after the driver thread's scheduler work. On this project's CPU
box that costs a batch's first op ~70-90 us and the driver's batch setup ~65 us more than
the same op measured hot, and steady-state layers ~10-20 % more (measured; docs/
VALIDATION.md). So calibration also runs a short calibration scenario
(:data:`gpu_backend.sched_timing.SCENARIO`, never a validation scenario) on the torch
runtime, re-times every batch shape it executed hot, and records, per op class, how the
loop differs (``calibrated.in_situ``):

- ``compute_scale``: median of (loop layer time / hot layer time), layers 1..L-1;
- ``first_op_s``: median of (loop layer 0 - scale x hot layer - hot embedding): the cold
  start of a batch's first op (index move, mask, caches refilled), added to layer 0;
- ``sample_scale``: median of (loop LM head + sampling / hot);
- ``setup_s``: median of (loop execute_batch - hot batch setup - its submits), added to
  the host's batch setup.
From the same runs: ``scheduler_step_s`` (completion to next prepare, before a decode
batch), ``admit_step_s`` (how much longer that gap is before a prefill batch: finishing
the last request, admitting the next, matching its prefix) and ``handoff_s`` (execute end
to the first device op), as medians like every op time. All three are thread wake-ups,
which on a loaded box now and then wait a whole time slice of another process (3-5 ms
here). A mean would carry that into the prediction, but how often it happens is the
load's, not the runtime's, and it moved by 5x between two calibrations a minute apart
(0.075 vs 0.53 ms): the median is the runtime's figure, stable, and the noise floor
shows what the load adds.
On a GPU the device-time factors come out near 1 and 0 (kernels do not run colder), the
host ones may not. Invariant: every factor is a ratio or difference of two measurements
of the same batch shape on this device.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from gpu_backend.calib_bench import host_time
from gpu_backend.calib_compute import ComputeBench
from gpu_backend.sched_timing import SCENARIO, driver_gaps
from gpu_backend.shapes import ModelShape


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


@dataclass
class LoopBatch:
    slices: list[tuple[int, int]]  # (new, context)
    layer0_s: float
    layer_s: float  # median of layers 1..L-1
    sample_s: float
    execute_s: float


def loop_batches(res: Any) -> list[LoopBatch]:
    """Per batch of one TorchResult: its shape and the loop's measured op times."""
    specs = res.extra.get("batch_specs") or {}
    rows: dict[int, dict[str, Any]] = {}
    for r in res.timeline.rows:
        if r.batch < 0 or r.batch not in specs:
            continue
        d = rows.setdefault(r.batch, {"layers": {}, "sample": None, "execute": None})
        if r.lane == "compute" and r.layer >= 0:
            d["layers"][r.layer] = r.end - r.start
        elif r.lane == "compute" and r.op == "sample":
            d["sample"] = r.end - r.start
        elif r.lane == "cpu" and r.op == "execute":
            d["execute"] = r.end - r.start
    out = []
    for b, d in sorted(rows.items()):
        layers = [d["layers"][i] for i in sorted(d["layers"])]
        if len(layers) < 2 or d["sample"] is None or d["execute"] is None:
            continue
        out.append(LoopBatch(list(specs[b]), layers[0], statistics.median(layers[1:]),
                             d["sample"], d["execute"]))
    return out


def in_situ(shape: ModelShape, device: str, page_size: int, op_submit_s: float,
            repeats: int = 2) -> dict[str, float]:
    """The ``calibrated.in_situ`` figures and the driver-thread figures (module doc)."""
    from gpu_backend.driver import run_scenario
    from hicache.scenario import load_resolved

    # built without pydantic (the GPU machine has none): the model inline, nothing looked up
    d = load_resolved({**SCENARIO, "cache": {**SCENARIO["cache"], "page_size": page_size},
                       "model": shape.to_mapping()})
    batches: list[LoopBatch] = []
    gaps: list[float] = []
    admits: list[float] = []
    hand: list[float] = []
    for _ in range(repeats):
        res = run_scenario(d, device=device, shape=shape, name="in-situ")
        batches += loop_batches(res)
        g, a, h = driver_gaps(res.timeline)
        gaps += g
        admits += a
        hand += h
    if len(batches) < 10 or len(gaps) < 10 or len(admits) < 5:
        raise ValueError(f"in-situ calibration saw {len(batches)} batches, {len(gaps)} decode "
                         f"and {len(admits)} prefill gaps, need 10, 10 and 5")
    biggest = max((len(b.slices), max(n + c for n, c in b.slices)) for b in batches)
    bench = ComputeBench(shape, device, page_size, [(biggest[0], biggest[1], 0)])
    scale, first, sample, setup = [], [], [], []
    hot: dict[tuple, tuple[float, float, float, float]] = {}
    for b in batches:
        key = tuple(b.slices)
        if key not in hot:
            hot[key] = (bench.layer(b.slices), bench.embed(b.slices), bench.sample(b.slices),
                        host_time(lambda s=b.slices: bench.index(s), False))
        layer, embed, samp, setup_hot = hot[key]
        scale.append(b.layer_s / layer)
        sample.append(b.sample_s / samp)
        setup.append(b.execute_s - setup_hot - (shape.num_layers + 1) * op_submit_s)
    s = statistics.median(scale)
    for b in batches:
        layer, embed, _, _ = hot[tuple(b.slices)]
        first.append(b.layer0_s - s * layer - embed)
    return {"compute_scale": s, "first_op_s": max(0.0, statistics.median(first)),
            "sample_scale": statistics.median(sample),
            "setup_s": max(0.0, statistics.median(setup)), "batches": len(batches),
            "scheduler_step_s": median(gaps),
            "admit_step_s": max(0.0, median(admits) - median(gaps)),
            "handoff_s": median(hand), "gaps": len(gaps) + len(admits)}
