"""A non-editable install works from any folder: presets and bundled scenarios ship as
package data (slow: builds a wheel and installs it into a temporary venv)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_runs_a_bundled_scenario_by_name(tmp_path):
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", "-w", str(wheels), str(ROOT)], tmp_path)
    assert built.returncode == 0, built.stderr
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                tmp_path).stdout.strip()
    # the dependencies come from this interpreter's site-packages (no registry needed);
    # hicache itself only from the wheel (this venv's editable hook is not processed there)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = wheels.glob("*.whl")
    inst = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                 "--no-deps", str(wheel)], tmp_path)
    assert inst.returncode == 0, inst.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    probe = _run([str(py), "-c", (
        "import json, hicache, hicache.presets as p\n"
        "from hicache.scenario import load_scenario\n"
        "s = load_scenario('quick')\n"
        "print(json.dumps({'file': hicache.__file__, 'root': str(p.data_root()),"
        " 'scenarios': p.known('scenarios'), 'hardware': p.known('hardware'),"
        " 'models': p.known('models'), 'model': s.model.name}))")], empty)
    assert probe.returncode == 0, probe.stderr
    info = json.loads(probe.stdout)
    assert info["file"].startswith(str(env_dir)) and info["root"].endswith("hicache/_bundled")
    for kind, folder in (("scenarios", "."), ("hardware", "hardware"), ("models", "models")):
        assert info[kind] == sorted(p.stem for p in (ROOT / "scenarios" / folder).glob("*.yaml"))
    assert info["model"] == "llama-3-8b"
    run = _run([str(env_dir / "bin" / "hicache-lab"), "run", "quick", "--variant", "L1",
                "--no-progress", "--out", str(empty / "out"), "--set",
                "workload.num_rounds=2"], empty)
    assert run.returncode == 0, run.stderr
    summary = json.loads((empty / "out" / "summary.json").read_text())
    assert summary["n_finished"] == summary["n_requests"] == 48
