"""Predict measured runs: read a measured folder (:mod:`gpu_backend.measure`), simulate each
scenario with a hardware profile and compare.

Invariant: the simulator sees the measured scenario exactly, except ``hardware`` (the
profile) and ``model`` (the shape the torch run used, as a mapping: the tiny test shape on
CPU, the scenario's preset elsewhere). Measured times are relative to the torch loop's
start, as the simulator's are to 0. With several runs the reference is their item-by-item
median (:func:`validation.compare.compare`) and the runs after the first give the noise
floor (:func:`validation.compare.noise_floor`).
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from hicache.report.frames import (
    read_requests_parquet,
    read_timeline_parquet,
    requests_frame,
    timeline_frame,
)
from hicache.scenario import Scenario
from sim.driver import SimResult, simulate
from sim.hardware.profile import HardwareProfile, load_profile
from validation.compare import DecisionsDiffer, Run, compare, noise_floor

MANIFEST = "measured.json"  # gpu_backend.measure.MANIFEST (not imported: that pulls torch)


@dataclass
class MeasuredRun:
    timeline: pd.DataFrame
    requests: pd.DataFrame
    decisions: list[tuple]
    info: dict[str, Any]

    def run(self) -> Run:
        return Run(self.timeline, self.requests, self.decisions)


@dataclass
class MeasuredScenario:
    dir: str
    body: dict[str, Any]
    source: str
    variant: str
    runs: list[MeasuredRun]


@dataclass
class MeasuredSet:
    root: Path
    device: str
    shape: dict[str, Any]
    profile: Path | None
    environment: dict[str, Any]
    scenarios: list[MeasuredScenario]

    @property
    def complete(self) -> bool:
        """The measurement finished (``measure`` marks environment.json last)."""
        return bool(self.environment.get("finished"))


def _tuples(x: Any) -> Any:
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def load_run(folder: Path) -> MeasuredRun:
    dec = json.loads((folder / "decisions.json").read_text())
    return MeasuredRun(read_timeline_parquet(folder / "timeline.parquet"),
                       read_requests_parquet(folder / "requests.parquet"),
                       [_tuples(d) for d in dec],
                       json.loads((folder / "run.json").read_text()))


def _manifest(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(measured.json, environment.json) of a measured folder, checked: format 1, scenario
    folders that are plain names inside it."""
    path = root / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"--measured: {root} has no {MANIFEST} (write one with "
                                f"hicache-lab measure SCENARIO... --out {root})")
    try:
        man = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(man, dict) or man.get("format") != 1:
        raise ValueError(f"{path}: format {man.get('format') if isinstance(man, dict) else man!r}"
                         ", this version reads 1")
    for s in man.get("scenarios", []):
        d = s.get("dir") if isinstance(s, dict) else None
        if not isinstance(d, str) or not d or d in (".", "..") or Path(d).name != d:
            raise ValueError(f"{path}: scenario folder {d!r} is not a plain folder name")
    env_path = root / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    return man, env


def check_measured(root: Path, *, partial: bool = False) -> None:
    """Refuse a measurement that did not finish (killed, or a run lost requests) unless
    ``partial``: its saved runs are real, but fewer than it asked for."""
    _, env = _manifest(root)
    if not env.get("finished") and not partial:
        raise ValueError(f"--measured {root}: the measurement did not finish (interrupted, "
                         "or a run failed: see its runs' run.json); measure again, or pass "
                         "--partial to score the runs it saved")


def load_measured(root: Path, only: list[str] | None = None) -> MeasuredSet:
    """Read a measured folder; ``only`` keeps the named scenario folders."""
    man, env = _manifest(root)
    scenarios = []
    for s in man["scenarios"]:
        if only and s["dir"] not in only:
            continue
        folder = root / s["dir"]
        body = yaml.safe_load((folder / "scenario.yaml").read_text())
        runs = [load_run(folder / r) for r in s["runs"]]
        scenarios.append(MeasuredScenario(s["dir"], body, s["source"], s["variant"], runs))
    if only:
        missing = sorted(set(only) - {s.dir for s in scenarios})
        if missing:
            raise ValueError(f"--only: {root} has no scenario {missing} (it has "
                             f"{[s['dir'] for s in man['scenarios']]})")
    prof = root / man["profile"] if man.get("profile") else None
    return MeasuredSet(root, man["device"], man["shape"], prof, env, scenarios)


def shape_warnings(profile: HardwareProfile, shape: Mapping[str, Any]) -> list[str]:
    """Why the profile's calibrated tables may not describe ``shape`` (a model mapping):
    its recorded ``calibrated.shape`` differs (key by key), or it has tables but records
    no shape."""
    cal = profile.calibrated
    if cal is None:
        return []
    recorded = cal.shape_mapping()
    name = shape.get("name", "?")
    if not recorded:
        return [f"profile {profile.source} has calibrated tables but no calibrated.shape: "
                f"cannot check that they were measured with shape {name!r}"]
    diff = []
    for key in sorted(set(recorded) & set(shape)):
        a, b = recorded[key], shape[key]
        if (tuple(a) if isinstance(a, list | tuple) else a) != (
                tuple(b) if isinstance(b, list | tuple) else b):
            diff.append(f"{key}: profile {a!r}, scenario {b!r}")
    if not diff:
        return []
    return [f"the scenario's model shape differs from the one profile {profile.source} was "
            f"calibrated with ({'; '.join(diff)}): the calibrated tables do not describe "
            f"this model"]


def sim_scenario(d: Mapping[str, Any], profile: str | Path | Mapping[str, Any],
                 shape: Mapping[str, Any], source: str = "<scenario>") -> Scenario:
    """The scenario the simulator runs: ``hardware`` = the profile (a mapping, or a path
    made absolute), ``model`` = the torch run's shape; the torch-only profiler key goes."""
    out = copy.deepcopy(dict(d))
    out["hardware"] = (dict(profile) if isinstance(profile, Mapping)
                       else str(Path(profile).resolve()))
    if isinstance(out.get("run"), Mapping):
        out["run"] = {k: v for k, v in out["run"].items() if k != "torch_profiler"}
    out["model"] = dict(shape)
    return Scenario.from_mapping(out, source=source)


@dataclass
class Validation:
    """One scenario predicted against its measured runs."""

    name: str
    predicted: SimResult
    pred_tl: pd.DataFrame
    meas_tl: pd.DataFrame  # the first measured run's
    pred_req: pd.DataFrame
    meas_req: pd.DataFrame
    comparison: dict
    info: dict[str, Any] = field(default_factory=dict)
    reference: list[Run] = field(default_factory=list)  # the measured runs scored against


def predict(body: Mapping[str, Any], profile: str | Path | Mapping[str, Any],
            shape: Mapping[str, Any], source: str = "<scenario>", name: str = "run"
            ) -> tuple[SimResult, pd.DataFrame, pd.DataFrame]:
    """Simulate one measured scenario: (result, timeline frame, requests frame)."""
    pred = simulate(sim_scenario(body, profile, shape, source), name=name, source=source,
                    progress=False)
    if len(pred.replicas) != 1:
        raise ValueError(f"{source}: validation compares one replica, got {len(pred.replicas)}")
    return pred, timeline_frame(pred.replicas[0].timeline), requests_frame(pred.records)


def validate_scenario(ms: MeasuredScenario, profile: str | Path | Mapping[str, Any],
                      shape: Mapping[str, Any]) -> Validation:
    """Predict ``ms`` with ``profile`` and compare with its first run; the second run,
    if any, is the noise floor. A decision mismatch is recorded (``scored`` False) rather
    than raised."""
    prof = load_profile(profile)
    warnings = shape_warnings(prof, shape)
    for w in warnings:
        print(f"validate: warning: {w}", file=sys.stderr)
    t = time.perf_counter()
    pred, pred_tl, pred_req = predict(ms.body, profile, shape, ms.source, ms.variant)
    wall_pred = time.perf_counter() - t
    ref = ms.runs[0]
    runs = [r.run() for r in ms.runs]
    try:
        cmp = compare(Run(pred_tl, pred_req, pred.decisions), runs)
    except DecisionsDiffer as e:
        cmp = {"scored": False, "reason": str(e), "decisions_equal": False}
    same = [r for r in runs if r.decisions == pred.decisions]
    cmp["noise"] = noise_floor(same or runs)
    work = ref.info.get("work_step_s") or [0.0]
    info = {
        "scenario": ms.source, "name": ms.dir, "variant": ms.variant,
        "shape": shape.get("name"), "profile": str(getattr(prof, "source", profile)),
        "requests": {"predicted": pred.requests, "measured": ref.info.get("requests")},
        "wall_s": {"measured_run": ref.info.get("wall_s"), "simulation": wall_pred},
        "scheduler_step_s": {"predicted": prof.scheduler_step_s,
                             "measured": float(statistics.median(work)),
                             "steps": len(ref.info.get("work_step_s") or [])},
        "duration_s": {"predicted": pred.sim_time, "measured": ref.info.get("wall_s")},
        "warnings": warnings,
        "l3_faults": ref.info.get("l3_faults", {}),  # gpu_backend.l3.faults.COUNTERS
    }
    return Validation(ms.dir, pred, pred_tl, ref.timeline, pred_req, ref.requests, cmp, info,
                      same)
