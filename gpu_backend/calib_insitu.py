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
On CPU only ops that ran alone count (no other lane's row overlaps them): beside another
thread an op is slowed by the interpreter lock, which the simulator models apart
(:mod:`sim.interpreter`); CUDA lanes take no lock, so there every op counts.
From the same runs, the driver thread between a completion and the next prepare
(:func:`gpu_backend.sched_timing.driver_gaps`): ``wakeup_s`` (to its first scheduler
step: the driver waking up) and the step from then to the prepare, ``scheduler_step_s``
when the step had nothing else to do, plus ``finish_step_s`` per request that finished
(released; the workload's follow-up generated), ``insert_step_s`` after a prefill batch
(its prompts enter the tree) and ``admit_step_s`` when it admits (a prefill batch next:
admission, prefix match), each the median of the steps that did it less what the others
explain, like every op time a median. Thread wake-ups on a loaded box now and then wait
a whole time slice of another process (3-5 ms here). A mean would carry that into the
prediction, but how often it happens is the load's, not the runtime's, and it moved by
5x between two calibrations a minute apart (0.075 vs 0.53 ms): the median is the
runtime's figure, stable, and the noise floor shows what the load adds.
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
from gpu_backend.sched_timing import SCENARIO, Gap, driver_gaps
from gpu_backend.shapes import ModelShape


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


@dataclass
class LoopBatch:
    """One batch's op times in the loop; None where the op ran beside another thread's
    (another lane's row overlaps it): that slowdown is the interpreter lock's
    (:mod:`sim.interpreter`), not the loop's."""

    slices: list[tuple[int, int]]  # (new, context)
    layer0_s: float | None
    layer_s: float | None  # median of layers 1..L-1 that ran alone
    sample_s: float | None
    execute_s: float | None


def _alone(rows: list[Any]) -> set[int]:
    """Indices of ``rows`` that no row of another lane overlaps."""
    order = sorted(range(len(rows)), key=lambda i: rows[i].start)
    out = set(range(len(rows)))
    active: list[int] = []  # rows started so far that may still be running
    for i in order:
        r = rows[i]
        active = [j for j in active if rows[j].end > r.start]
        for j in active:
            if rows[j].lane != r.lane:
                out.discard(i)
                out.discard(j)
        active.append(i)
    return out


def loop_batches(res: Any, only_alone: bool = True) -> list[LoopBatch]:
    """Per batch of one TorchResult: its shape and the loop's measured op times (with
    ``only_alone``, None for ops that ran beside another lane's: the CPU runtime)."""
    specs = res.extra.get("batch_specs") or {}
    all_rows = list(res.timeline.rows)
    alone = _alone(all_rows) if only_alone else set(range(len(all_rows)))
    rows: dict[int, dict[str, Any]] = {}
    for i, r in enumerate(all_rows):
        if r.batch < 0 or r.batch not in specs:
            continue
        d = rows.setdefault(r.batch, {"layers": {}, "sample": None, "execute": None})
        t = r.end - r.start if i in alone else None
        if r.lane == "compute" and r.layer >= 0:
            d["layers"][r.layer] = t
        elif r.lane == "compute" and r.op == "sample":
            d["sample"] = (t,)
        elif r.lane == "cpu" and r.op == "execute":
            d["execute"] = (t,)
    out = []
    for b, d in sorted(rows.items()):
        layers = [d["layers"][i] for i in sorted(d["layers"])]
        if len(layers) < 2 or d["sample"] is None or d["execute"] is None:
            continue
        rest = [x for x in layers[1:] if x is not None]
        out.append(LoopBatch(list(specs[b]), layers[0],
                             statistics.median(rest) if rest else None,
                             d["sample"][0], d["execute"][0]))
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
    gaps: list[Gap] = []
    for _ in range(repeats):
        res = run_scenario(d, device=device, shape=shape, name="in-situ")
        # on CUDA the lanes share no interpreter lock: every op is a sample
        batches += loop_batches(res, only_alone=not device.startswith("cuda"))
        gaps += driver_gaps(res.timeline, [r["finish"] for r in res.records
                                           if r.get("finish") is not None])
    plain = [g for g in gaps if not (g.after_prefill or g.admits or g.finished)]
    admits = [g for g in gaps if g.admits]
    if len(batches) < 10 or len(plain) < 10 or len(admits) < 5:
        raise ValueError(f"in-situ calibration saw {len(batches)} batches, {len(plain)} plain "
                         f"decode and {len(admits)} prefill gaps, need 10, 10 and 5")
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
        if b.layer_s is not None:
            scale.append(b.layer_s / layer)
        if b.sample_s is not None:
            sample.append(b.sample_s / samp)
        if b.execute_s is not None:
            setup.append(b.execute_s - setup_hot - (shape.num_layers + 1) * op_submit_s)
    if min(len(scale), len(sample), len(setup)) < 5:
        raise ValueError(f"in-situ calibration: too few ops ran alone ({len(scale)} layers, "
                         f"{len(sample)} samplings, {len(setup)} executes; need 5 each)")
    s = statistics.median(scale)
    for b in batches:
        layer, embed, _, _ = hot[tuple(b.slices)]
        if b.layer0_s is not None:
            first.append(b.layer0_s - s * layer - embed)
    return {"compute_scale": s, "first_op_s": max(0.0, statistics.median(first)),
            "sample_scale": statistics.median(sample),
            "setup_s": max(0.0, statistics.median(setup)), "batches": len(batches),
            **step_costs(gaps), "gaps": len(gaps)}


def step_costs(gaps: list[Gap]) -> dict[str, float]:
    """``wakeup_s``, ``scheduler_step_s``, ``finish_step_s``, ``insert_step_s`` and
    ``admit_step_s`` from the driver's gaps (module doc; 0 when no gap did that)."""
    base = median([g.step for g in gaps if not (g.after_prefill or g.admits or g.finished)])
    fin = median([(g.step - base) / g.finished for g in gaps
                  if g.finished and not (g.after_prefill or g.admits)])
    ins = median([g.step - base - fin * g.finished for g in gaps
                  if g.after_prefill and not g.admits])
    adm = median([g.step - base - fin * g.finished - ins * g.after_prefill
                  for g in gaps if g.admits])
    return {"wakeup_s": median([g.wake for g in gaps if g.wake is not None]),
            "scheduler_step_s": base, "finish_step_s": max(0.0, fin),
            "insert_step_s": max(0.0, ins), "admit_step_s": max(0.0, adm)}
