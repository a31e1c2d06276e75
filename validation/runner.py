"""Run one scenario on the TorchRuntime (measured) and in the simulator (predicted).

Invariant: both runs see the same scenario dict except ``hardware`` (the simulator gets the
given profile) and ``model`` (the simulator gets the shape the torch run used: the tiny
test shape on CPU, the scenario's preset elsewhere). The measured timeline is shifted so
that it starts at the torch loop's start (``t0``), as the simulator's starts at 0.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gpu_backend.driver import TorchResult, run_scenario
from gpu_backend.shapes import ModelShape
from hicache.report.frames import requests_frame, timeline_frame
from hicache.scenario import Scenario, as_scenario
from sim.driver import SimResult, simulate
from sim.hardware.profile import HardwareProfile, load_profile
from validation.compare import compare


@dataclass
class Validation:
    """Both runs, their frames (measured times relative to the torch loop's start) and
    the :func:`validation.compare.compare` record."""

    predicted: SimResult
    measured: TorchResult
    pred_tl: pd.DataFrame
    meas_tl: pd.DataFrame
    pred_req: pd.DataFrame
    meas_req: pd.DataFrame
    comparison: dict
    info: dict[str, Any] = field(default_factory=dict)


def model_mapping(shape: ModelShape) -> dict[str, Any]:
    """A model-preset mapping (shared schema) that ``sim.hardware.model.load_model``
    accepts and that describes ``shape`` exactly."""
    return shape.to_mapping()


def shape_warnings(profile: HardwareProfile, shape: ModelShape) -> list[str]:
    """Why the profile's calibrated tables may not describe ``shape``: its recorded
    ``calibrated.shape`` differs (key by key), or it has tables but records no shape."""
    cal = profile.calibrated
    if cal is None:
        return []
    recorded = cal.shape_mapping()
    if not recorded:
        return [f"profile {profile.source} has calibrated tables but no calibrated.shape: "
                f"cannot check that they were measured with shape {shape.name!r}"]
    mine = shape.to_mapping()
    diff = []
    for key in sorted(set(recorded) & set(mine)):
        a, b = recorded[key], mine[key]
        if (tuple(a) if isinstance(a, list | tuple) else a) != (
                tuple(b) if isinstance(b, list | tuple) else b):
            diff.append(f"{key}: profile {a!r}, scenario {b!r}")
    if not diff:
        return []
    return [f"the scenario's model shape differs from the one profile {profile.source} was "
            f"calibrated with ({'; '.join(diff)}): the calibrated layer tables do not "
            f"describe this model"]


def shape_for(d: Scenario | Mapping[str, Any], device: str) -> ModelShape:
    """The shape run_scenario uses: tiny on CPU, else the scenario's model."""
    return ModelShape.tiny() if device == "cpu" else as_scenario(d).model


def sim_scenario(d: Scenario | Mapping[str, Any], profile: str | Path, shape: ModelShape,
                 device: str) -> Scenario:
    """The scenario the simulator runs: ``hardware`` = the profile, ``model`` = the torch
    run's shape."""
    sc = as_scenario(d)
    out = sc.to_mapping()
    out["hardware"] = str(Path(profile).resolve())
    out["model"] = model_mapping(shape)
    return Scenario.from_mapping(out, source=sc.source, base=sc.base_dir)


def validate(d: Scenario | Mapping[str, Any], profile: str | Path, *, device: str = "cpu",
             name: str = "run", source: str = "<scenario>",
             torch_trace: str | Path | None = None) -> Validation:
    """Run ``d`` measured then predicted and compare them. Shape warnings
    (:func:`shape_warnings`) go to stderr and to ``info["warnings"]``; ``torch_trace``
    writes a torch.profiler Chrome trace of the measured run (gpu_backend.trace)."""
    prof = load_profile(str(profile))  # fail fast on a bad profile, before the long runs
    d = as_scenario(d, source=source)
    shape = shape_for(d, device)
    warnings = shape_warnings(prof, shape)
    for w in warnings:
        print(f"validate: warning: {w}", file=sys.stderr)
    t = time.perf_counter()
    meas = run_scenario(d, device=device, shape=shape, name=name, source=source,
                        torch_trace=torch_trace)
    wall_meas = time.perf_counter() - t
    sd = sim_scenario(d, profile, shape, device)
    t = time.perf_counter()
    pred = simulate(sd, name=name, source=source, progress=False)
    wall_pred = time.perf_counter() - t
    if len(pred.replicas) != 1:
        raise ValueError(f"{source}: validation compares one replica, got {len(pred.replicas)}")
    pred_tl = timeline_frame(pred.replicas[0].timeline)
    meas_tl = timeline_frame(meas.timeline)
    meas_tl["start"] -= meas.t0
    meas_tl["end"] -= meas.t0
    pred_req, meas_req = requests_frame(pred.records), requests_frame(meas.records)
    cmp = compare(pred_tl, meas_tl, pred_req, meas_req, pred.decisions, meas.decisions)
    work = meas.extra.get("work_step_s") or [0.0]
    info = {
        "device": device, "shape": shape.name, "profile": str(profile),
        "requests": {"predicted": pred.requests, "measured": meas.requests},
        "wall_s": {"measured_run": wall_meas, "simulation": wall_pred},
        "scheduler_step_s": {  # measured as calibrated: median over working steps
            "predicted": prof.scheduler_step_s, "measured": float(statistics.median(work)),
            "steps": len(meas.extra.get("work_step_s") or [])},
        "duration_s": {"predicted": pred.sim_time, "measured": meas.wall_time},
        "warnings": warnings,
        "l3_faults": meas.extra.get("l3_faults", {}),  # gpu_backend.l3.faults.COUNTERS
    }
    if meas.extra.get("torch_trace"):
        info["torch_trace"] = meas.extra["torch_trace"]
    return Validation(pred, meas, pred_tl, meas_tl, pred_req, meas_req, cmp, info)
