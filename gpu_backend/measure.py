"""``hicache-lab measure``: run scenarios on the torch runtime and keep everything a later
prediction needs, with torch only (no simpy: the GPU machine has none).

A measured folder is an artifact a user keeps and re-predicts anywhere
(``hicache-lab validate --measured DIR``)::

    DIR/measured.json          manifest: format, device, shape, scenarios and their runs
    DIR/environment.json       device name, driver, torch, clocks, CPU, load average
    DIR/profile.yaml           the calibrated hardware profile (unless --profile/--no-calibrate)
    DIR/<scenario>/scenario.yaml          the scenario exactly as run (variant applied)
    DIR/<scenario>/run<k>/timeline.parquet, requests.parquet, decisions.json, run.json

Invariant: each file is written as soon as its step finishes and the manifest is rewritten
after every run, so a killed measurement leaves every finished run readable; only a
measurement that finished gets ``"finished": true`` in environment.json (written last;
an ``--append`` keeps false where an earlier measurement into the folder did not finish),
and ``validate --measured`` refuses one without it unless ``--partial``. An existing
folder is refused unless ``--append`` (add scenarios) or ``--overwrite`` (replace a
measured folder; any other folder is never replaced). Several runs
per scenario (``--repeats``, default 3, taken round the scenarios) give a median reference
and the noise floor.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

FORMAT = 1
MANIFEST = "measured.json"


class IncompleteRun(RuntimeError):
    """A measured run in which requests did not finish (the folder stays unfinished)."""


def safe_name(text: str) -> str:
    """A folder name for a scenario/variant (letters, digits, ``._-``)."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")
    return out or "scenario"


def pick_variant(sc: Any, variant: str | None) -> tuple[str, Any]:
    """(variant name, Scenario): the named variant, else the first (the base without
    any)."""
    variants = sc.expand()
    if variant is None:
        return variants[0]
    return variant, sc.variant(variant)


def shape_for(sc: Any, device: str):  # noqa: ANN201 - ModelShape
    """The shape the torch run uses: tiny on CPU, else the scenario's model."""
    from gpu_backend.shapes import ModelShape

    return ModelShape.tiny() if device == "cpu" else sc.model


def environment(device: str) -> dict[str, Any]:
    """What ran the measurement: device, driver, library versions, clocks if readable."""
    import torch

    env: dict[str, Any] = {
        "device": device, "torch": torch.__version__, "python": sys.version.split()[0],
        "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        env["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    if device == "cuda" and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update({"device_name": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
                    "gpu_memory_bytes": int(p.total_memory),
                    "multiprocessors": int(p.multi_processor_count)})
        env.update(_nvidia_smi())
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def _nvidia_smi() -> dict[str, Any]:
    """Driver version and clocks from nvidia-smi when it exists (never fails)."""
    fields = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu"
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    vals = [v.strip() for v in r.stdout.splitlines()[0].split(",")] if r.stdout else []
    return {f"nvidia_smi.{k}": v for k, v in zip(fields.split(","), vals, strict=False)}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def save_run(res: Any, folder: Path) -> dict[str, Any]:
    """Write one TorchResult (times relative to the loop's start) into ``folder``."""
    from hicache.report.frames import (
        requests_frame,
        timeline_frame,
        write_requests_parquet,
        write_timeline_parquet,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tl = timeline_frame(res.timeline)
    tl["start"] -= res.t0
    tl["end"] -= res.t0
    write_timeline_parquet(tl, folder / "timeline.parquet")
    req = requests_frame(res.records)
    for col in ("arrival", "admitted", "first_token", "finish"):  # the timeline's zero
        req[col] -= res.t0
    write_requests_parquet(req, folder / "requests.parquet")
    _write_json(folder / "decisions.json", [list(d) for d in res.decisions])
    info = {"wall_s": res.wall_time, "requests": res.requests,
            "finished": sum(1 for r in res.records if r.get("finish") is not None),
            "rejected": {str(k): v for k, v in res.rejected.items()},
            "unfinished": {str(k): v for k, v in res.unfinished.items()},
            "stall": res.stall,
            **{k: v for k, v in res.extra.items() if k != "device"}}
    _write_json(folder / "run.json", info)
    return info


class Measurement:
    """One measured folder being written (see the module doc)."""

    def __init__(self, out: Path, device: str, shape: Any, append: bool = False,
                 overwrite: bool = False) -> None:
        self.out, self.device, self.shape = out, device, shape
        path = out / MANIFEST
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {out} exists and is not a folder")
        if out.is_dir() and any(out.iterdir()) and not path.is_file():
            raise ValueError(f"--out {out} exists and is not a measured folder (refused "
                             "even with --overwrite)")
        if path.is_file() and overwrite:
            import shutil

            shutil.rmtree(out)
        elif path.is_file() and not append:
            raise ValueError(f"--out {out} already holds a measurement; give a new folder, "
                             f"--append to add scenarios to it or --overwrite to replace it")
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / ".write-test").write_bytes(b"")
            (out / ".write-test").unlink()
        except OSError as e:
            raise ValueError(f"--out {out}: cannot write there ({e.strerror or e})") from None
        self.manifest: dict[str, Any] = {"format": FORMAT, "device": device,
                                         "shape": shape.to_mapping(), "profile": None,
                                         "scenarios": []}
        if path.is_file():
            old = json.loads(path.read_text())
            if (old.get("device"), old.get("shape")) != (device, shape.to_mapping()):
                raise ValueError(f"--append: {out} was measured on {old.get('device')} with "
                                 f"shape {old.get('shape', {}).get('name')!r}, not {device} "
                                 f"with {shape.name!r}")
            self.manifest = old

    def save(self) -> None:
        _write_json(self.out / MANIFEST, self.manifest)

    def add_scenario(self, name: str, body: Any, source: str,
                     variant: str) -> tuple[Path, dict[str, Any]]:
        folder = self.out / name
        if any(s["dir"] == name for s in self.manifest["scenarios"]):
            raise ValueError(f"two scenarios measure into {folder}: give them distinct names")
        folder.mkdir(parents=True, exist_ok=True)
        data = body.to_mapping()  # resolved: the model as a mapping, every default filled
        (folder / "scenario.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        entry = {"dir": name, "name": str(body.name), "variant": variant,
                 "source": source, "runs": []}
        self.manifest["scenarios"].append(entry)
        self.save()
        return folder, entry


def measure(scenarios: list[tuple[str, Any, str, str]], device: str, out: Path, *,
            repeats: int = 3, profile: Path | None = None, calibrate: bool = True,
            torch_trace: Path | None = None, append: bool = False,
            log: Any = print, priority: str = "none", overwrite: bool = False) -> Path:
    """Measure ``[(folder name, scenario body, source, variant)]`` into ``out``; calibrate
    first unless a ``profile`` is given, ``calibrate`` is False or (``append``) the folder
    already has one. ``torch_trace``: a torch.profiler Chrome trace of the first run
    (profiling slows it). ``priority``: calibrate and measure at that scheduling priority
    (:mod:`gpu_backend.priority`; recorded in environment.json). ``overwrite`` replaces a
    previous measured folder. Returns ``out``."""
    from gpu_backend.priority import high_priority

    with high_priority(priority) as applied:
        if priority != "none":
            log(f"measure: priority {applied}")
        return _measure(scenarios, device, out, repeats, profile, calibrate, torch_trace,
                        (append, overwrite), log, {"priority": applied})


def _measure(scenarios: list[tuple[str, Any, str, str]], device: str, out: Path,
             repeats: int, profile: Path | None, calibrate: bool, torch_trace: Path | None,
             mode: tuple[bool, bool], log: Any, env: dict[str, Any]) -> Path:
    from gpu_backend.driver import run_scenario

    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    shapes = {n: shape_for(b, device) for n, b, _, _ in scenarios}
    distinct = set(shapes.values())
    if len(distinct) > 1:
        raise ValueError("measure: the scenarios use different model shapes "
                         f"({', '.join(f'{n}: {s.name}' for n, s in shapes.items())}); "
                         f"measure them into separate folders (one profile per shape)")
    shape = next(iter(distinct))
    names = [n.lower() for n, _, _, _ in scenarios]  # case-insensitive file systems too
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # before anything is calibrated or written
        raise ValueError(f"measure: several scenarios measure into {twice}: give them "
                         "distinct names")
    m = Measurement(out, device, shape, *mode)
    # an --append to a folder whose earlier measurement did not finish stays unfinished
    before = out / "environment.json"
    whole = not m.manifest["scenarios"] or (
        before.is_file() and json.loads(before.read_text()).get("finished") is True)
    _write_json(out / "environment.json", {**environment(device), **env})
    m.save()
    if profile is None and m.manifest.get("profile"):
        log(f"measure: keeping the profile already in {out}")
    elif profile is not None:
        text = Path(profile).read_text()
        (out / "profile.yaml").write_text(text)
        m.manifest["profile"] = "profile.yaml"
        m.manifest["profile_source"] = str(profile)
    elif calibrate:
        from gpu_backend.calibrate import calibrate as run_calibration
        from gpu_backend.calibrate import to_yaml

        t = time.perf_counter()
        prof, src = run_calibration(shape, device)
        prof["name"] = f"calibrated-{device}"
        (out / "profile.yaml").write_text(to_yaml(prof, src))
        m.manifest["profile"] = "profile.yaml"
        log(f"measure: calibrated {device} ({shape.name}) in {time.perf_counter() - t:.1f} s")
    m.save()
    # runs go round the scenarios (s1 r0, s2 r0, ..., s1 r1, ...): a burst of load from
    # another process then spoils one run of several scenarios, which the per-item median
    # over runs removes, rather than every run of one scenario
    added = [(m.add_scenario(name, body, source, variant), body, source, variant)
             for name, body, source, variant in scenarios]
    for k in range(repeats):
        for (folder, entry), body, source, variant in added:
            t = time.perf_counter()
            res = run_scenario(body, device=device, shape=shape, name=variant,
                               source=source, torch_trace=torch_trace if k == 0 else None)
            info = save_run(res, folder / f"run{k}")
            entry["runs"].append(f"run{k}")
            m.save()
            lost = len(res.unfinished)
            log(f"measure: {entry['dir']} run{k}: {info['requests']} requests, "
                f"{res.wall_time:.2f} s measured, {time.perf_counter() - t:.1f} s wall"
                + (f", {lost} NOT FINISHED" if lost else "")
                + (f", {len(res.rejected)} rejected" if res.rejected else ""))
            if lost:
                raise IncompleteRun(f"measure: {entry['dir']} run{k}: {lost} of "
                                   f"{info['requests']} requests did not finish "
                                   f"({res.stall or next(iter(res.unfinished.values()))})")
    _write_json(out / "environment.json", {**environment(device), **env, "finished": whole})
    return out


def load_for_measure(paths: list[Path], overrides: list[str], variant: str | None
                     ) -> list[tuple[str, Any, str, str]]:
    """[(folder name, Scenario, source, variant)] for every scenario file given."""
    from hicache.scenario import load_scenario

    out = []
    for p in paths:
        sc = load_scenario(p, overrides)
        vname, body = pick_variant(sc, variant)
        name = safe_name(str(sc.name) if variant is None else f"{sc.name}.{vname}")
        out.append((name, body, str(p), vname))
    return out


def run_args(args: Any) -> int:
    """The ``measure`` command (arguments: gpu_backend.command)."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and args.threads is None:
        args.threads = 1  # two threads on a shared box lose whole ticks at barriers
    if args.threads:
        torch.set_num_threads(args.threads)
    scenarios = load_for_measure(args.scenarios, args.overrides, args.variant)
    if args.profile is not None and not args.profile.is_file():
        raise FileNotFoundError(f"--profile: no such file {args.profile}")
    try:
        measure(scenarios, device, args.out, repeats=args.repeats, profile=args.profile,
                calibrate=not args.no_calibrate, append=args.append,
                priority=getattr(args, "priority", "none"),
                overwrite=getattr(args, "overwrite", False))
    except IncompleteRun as e:  # named, no traceback; exit 1 as run does
        print(f"hicache-lab measure: error: {e}; the runs so far are kept in {args.out}, "
              "marked unfinished", file=sys.stderr)
        return 1
    print(f"-> {args.out} (predict anywhere: hicache-lab validate --measured {args.out})")
    return 0
