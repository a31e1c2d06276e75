"""The layering rules of ARCHITECTURE.md, checked on the source (imports are parsed, not run).

    hicache/      imports no simpy, no torch, no sim, no gpu_backend, and reads no clock
    sim/          may import hicache and simpy; never torch or gpu_backend
    gpu_backend/  may import hicache and torch; never simpy or sim (the GPU box has no simpy)
    validation/   composes both runtimes; nothing above imports it
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "hicache": {"simpy", "torch", "sim", "gpu_backend", "validation"},
    "sim": {"torch", "gpu_backend", "validation"},
    "gpu_backend": {"simpy", "sim", "validation"},
}
CLOCKS = {("time", "time"), ("time", "perf_counter"), ("time", "monotonic"),
          ("datetime", "now"), ("time", "time_ns"), ("time", "perf_counter_ns")}
# The CLI layer reports wall time of a whole command; it is not part of the control plane.
CLOCK_EXEMPT = {"hicache/cli.py", "hicache/replay/command.py", "hicache/run_command.py",
                "hicache/validate_command.py"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def clock_calls(path: Path) -> set[tuple[str, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in CLOCKS:
                found.add((node.value.id, node.attr))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layering(package: str) -> None:
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_roots(path) & FORBIDDEN[package]
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_control_plane_reads_no_clock() -> None:
    offenders = {}
    for path in sorted((ROOT / "hicache").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in CLOCK_EXEMPT:
            continue
        calls = clock_calls(path)
        if calls:
            offenders[rel] = sorted(calls)
    assert offenders == {}


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("import torch\nfrom simpy import Environment\nimport time\nt = time.time()\n")
    assert imported_roots(bad) >= {"torch", "simpy"}
    assert clock_calls(bad) == {("time", "time")}
