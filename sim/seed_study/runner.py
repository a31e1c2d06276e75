"""Run the seed study's scenarios and sweeps through the CLI, one subprocess each (the
commands a reader can type; a process per run also hands its memory back).

Run folders go under ``OUT/runs`` and sweeps under ``OUT/sweeps`` (neither is committed);
with ``reuse`` a folder that is complete (``run.json`` / ``.complete``) is read, not rerun.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from sim.seed_study.spec import Sweep, scenario_of

RUN_OUTPUT = ("--overwrite", "--no-trace", "--no-plots", "--no-progress")


def cli(args: Sequence[str], *, root: Path) -> None:
    """``hicache-lab ARGS`` in a subprocess; raises with its output when it fails."""
    cmd = [sys.executable, "-m", "hicache.cli", *args]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def _sets(items: Sequence[str]) -> list[str]:
    return [x for s in items for x in ("--set", s)]


def run_args(scenario: str, sets: Sequence[str] = (), variants: Sequence[str] = ()
             ) -> list[str]:
    """The ``hicache-lab`` arguments of one study run, without its output options."""
    return ["run", scenario, *_sets(sets), *(x for v in variants for x in ("--variant", v))]


def sweep_args(sw: Sweep) -> list[str]:
    """The ``hicache-lab`` arguments of one assumption sweep, without its output options."""
    grid = [x for key, values in sw.grid
            for x in ("--grid", f"{key}={','.join(map(str, values))}")]
    return ["sweep", scenario_of(sw), "--executor", "local", *_sets(sw.sets), *grid,
            *(x for v in sw.variants for x in ("--variant", v))]


def run(scenario: str, out: Path, *, root: Path, sets: Sequence[str] = (),
        variants: Sequence[str] = (), reuse: bool = False) -> Path:
    """``hicache-lab run`` of ``scenario`` into ``out`` (no traces, no per-run plots)."""
    if reuse and (out / "run.json").exists():
        return out
    cli([*run_args(scenario, sets, variants), "--out", str(out), *RUN_OUTPUT], root=root)
    return out


def sweep(sw: Sweep, out: Path, *, root: Path, reuse: bool = False) -> pd.DataFrame:
    """``hicache-lab sweep`` of ``sw`` (local executor) into ``out``; its table."""
    if not (reuse and (out / ".complete").exists()):
        cli([*sweep_args(sw), "--out", str(out), "--overwrite", "--no-plots"], root=root)
    return pd.read_parquet(out / "sweep.parquet")


def requests(folder: Path, variant: str) -> pd.DataFrame:
    """One variant's ``requests.csv`` of a run folder."""
    from hicache.report.outputs import safe_name

    return pd.read_csv(folder / safe_name(variant) / "requests.csv")


def unfinished(folder: Path, variant: str) -> int:
    """Requests of one variant that did not finish (its ``summary.json``; 0 if absent)."""
    import json

    from hicache.report.outputs import safe_name

    path = folder / safe_name(variant) / "summary.json"
    return int(json.loads(path.read_text()).get("n_unfinished", 0)) if path.exists() else 0
