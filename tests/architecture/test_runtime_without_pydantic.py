"""The runtime path needs no validation library: pydantic is the input edge's alone.

A scenario validated here and written resolved (``scenario.resolved.json``) runs where
neither pydantic nor simpy can be imported, as on the GPU machine (issue 7 §2); importing
the runtime path does not import pydantic even where it is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hicache.scenario import load_scenario, write_resolved
from tests.architecture.blocking import ROOT, run_without

# the modules the torch half (measure, the torch driver) and the simulator import
RUNTIME_PATH = ("hicache.scenario", "hicache.scenario.resolved", "hicache.scheduler.scheduler",
                "hicache.workload.factory", "hicache.routing", "hicache.config",
                "hicache.modelspec", "hicache.cli", "gpu_backend.driver", "sim.driver",
                "sim.sweep_exec")
TINY = ["cache.device_tokens=2048", "cache.page_size=16", "workload.num_clients=3",
        "workload.num_rounds=2", "workload.request_length=40", "workload.output_length=4",
        "workload.request_rate=inf"]


def test_importing_the_runtime_path_imports_no_pydantic() -> None:
    code = (f"import importlib, sys\nfor m in {RUNTIME_PATH!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'pydantic_core', 'annotated_types')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_torch_driver_runs_a_resolved_scenario_without_pydantic_or_simpy(tmp_path: Path
                                                                           ) -> None:
    pytest.importorskip("torch")
    sc = load_scenario("quick", TINY).variant("L1+L2")
    path = write_resolved(sc, tmp_path / "scenario.resolved.json")
    code = (
        "import json\n"
        "from hicache.scenario import load_scenario\n"
        "from gpu_backend.driver import run_scenario\n"
        f"sc = load_scenario({str(path)!r})\n"
        "res = run_scenario(sc, device='cpu', name='L1+L2')\n"
        "blocked = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'simpy')]\n"
        "print(json.dumps({'requests': res.requests, 'blocked': blocked,\n"
        "    'finished': sum(r['finish'] is not None for r in res.records),\n"
        "    'records': len(res.records), 'device_tokens': sc.cache.device_tokens}))\n"
    )
    r = run_without(("pydantic", "pydantic_core", "simpy"), code, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["requests"] == 6 and out["records"] == 6 and out["finished"] == 6, out
    assert out["blocked"] == [] and out["device_tokens"] == 2048


def test_without_pydantic_validating_raw_input_says_what_to_do() -> None:
    code = ("from hicache.scenario import load_scenario\n"
            "try:\n    load_scenario('quick')\n"
            "except ImportError as e:\n    print(e)\n")
    r = run_without(("pydantic", "pydantic_core"), code)
    assert r.returncode == 0, r.stderr
    assert "needs pydantic" in r.stdout and "load_resolved" in r.stdout
