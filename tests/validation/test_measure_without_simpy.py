"""The measure half runs where neither simpy nor pydantic can be imported (the GPU machine
has neither): ``hicache-lab measure`` of a resolved scenario, calibration included, in a
subprocess with both blocked writes a measured folder, and no simulator module was loaded
(the CLI lists every command, so the packages themselves are touched; the ones that need
simpy fail to import and are reported unavailable)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios/validation/cpu_loop.yaml"
CODE = """
import sys
sys.modules["simpy"] = None  # import simpy -> ImportError
sys.modules["pydantic"] = None
sys.modules["zmq"] = None  # pyzmq: only a runtime in its own process needs it
import gpu_backend.calibrate, gpu_backend.calib_insitu  # calibration's whole module graph
from hicache.cli import main
rc = main(sys.argv[1:])
bad = sorted(m for m in ("simpy", "pydantic", "zmq", "sim.runtime", "sim.driver", "sim.cost",
                        "validation.runner") if sys.modules.get(m) is not None)
print("IMPORTED", bad)
sys.exit(rc)
"""


def test_measure_imports_no_simpy_and_writes_a_measured_folder(tmp_path):
    from hicache.scenario import load_scenario, write_resolved

    resolved = write_resolved(load_scenario(SCENARIO), tmp_path / "cpu_loop.json")
    out = tmp_path / "m"
    r = subprocess.run([sys.executable, "-c", CODE, "measure", str(resolved), "--device",
                        "cpu", "--out", str(out), "--repeats", "1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "IMPORTED []" in r.stdout
    man = json.loads((out / "measured.json").read_text())
    assert man["device"] == "cpu" and man["shape"]["name"] == "tiny"
    assert man["scenarios"][0]["runs"] == ["run0"]
    for name in ("timeline.parquet", "requests.parquet", "decisions.json", "run.json"):
        assert (out / "cpu_loop" / "run0" / name).stat().st_size > 0
    assert "in_situ" in (out / "profile.yaml").read_text()  # calibrated there too
    env = json.loads((out / "environment.json").read_text())
    assert {"device", "torch", "device_name", "cpu_count"} <= set(env)
