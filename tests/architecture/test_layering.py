"""The layering rules of ARCHITECTURE.md, checked on the source (imports are parsed, not run).

    hicache/      imports no simpy, no torch, no sim, no gpu_backend, and reads no clock
    sim/          may import hicache and simpy; never torch or gpu_backend
    gpu_backend/  may import hicache and torch; never simpy or sim (the GPU box has no simpy)
    validation/   composes both runtimes; nothing above imports it
    pydantic      imported by no module at import time; only inside the input edge's
                  functions (hicache/schema/, hicache/scenario/) and pydantic's own hooks
    ipc/          the RuntimeInterface across a process: hicache and zmq only (the runtime
                  is built in the child by a factory the composition root passes)
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
    "ipc": {"simpy", "torch", "sim", "gpu_backend", "validation"},
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


EDGE = ("hicache/schema/", "hicache/scenario/")
HOOKS = {"__get_pydantic_core_schema__", "__get_pydantic_json_schema__"}
VALIDATION = {"pydantic", "pydantic_core", "annotated_types"}


def validation_imports(path: Path) -> list[tuple[int, str | None]]:
    """``(line, enclosing function or None)`` of each import of a validation library that
    runs (``if TYPE_CHECKING:`` blocks do not)."""
    found: list[tuple[int, str | None]] = []

    def visit(node: ast.AST, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub, func)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            if any(n.split(".")[0] in VALIDATION for n in names):
                found.append((child.lineno, func))
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                else func
            visit(child, inner)

    visit(ast.parse(path.read_text(), filename=str(path)), None)
    return found


def test_pydantic_is_imported_lazily_and_only_by_the_input_edge() -> None:
    offenders = {}
    for package in ("hicache", "sim", "gpu_backend", "validation"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            bad = [line for line, func in validation_imports(path)
                   if func is None or (func not in HOOKS and not rel.startswith(EDGE))]
            if bad:
                offenders[rel] = bad
    assert offenders == {}


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
    lazy = tmp_path / "v.py"
    lazy.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pydantic\n"
                    "import pydantic_core\ndef f():\n    from pydantic import TypeAdapter\n")
    assert validation_imports(lazy) == [(4, None), (6, "f")]


# Inside hicache/: lower layers never import higher ones (nor siblings of one layer: replay
# drives the cache manager, not the scheduler). Commands (command.py, cli*.py) are the top.
HICACHE_LAYERS = (
    {"lazy"},  # PEP 562 export hooks, stdlib only
    {"units", "schema", "timeline", "collector"},  # collector: stdlib gc only
    {"presets", "runtime", "model_parts"},  # model_parts: the model spec's typed pieces
    {"modelspec", "tree"},
    {"config"},
    {"tiers"},
    {"workload"},  # requests carry packed page keys and their hash chain (tree, tiers)
    {"kvcache"},
    {"scheduler", "routing", "replay"},
    {"report", "scenario", "sglang"},
)
RANK = {name: i for i, layer in enumerate(HICACHE_LAYERS) for name in layer}
COMMANDS = {"cli", "cli_common"}  # and every command.py: the composition root
TOP = len(HICACHE_LAYERS)


def hicache_package(path: Path) -> str:
    rel = path.relative_to(ROOT / "hicache")
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def hicache_imports(path: Path) -> set[str]:
    """The hicache subpackages ``path`` imports (``hicache.X...`` -> ``X``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                 and node.module else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "hicache" and len(parts) > 1:
                out.add(parts[1])
    return out


def test_hicache_layers_import_only_downwards() -> None:
    offenders = {}
    for path in sorted((ROOT / "hicache").rglob("*.py")):
        if path.name == "__main__.py" or path == ROOT / "hicache" / "__init__.py":
            continue
        own = hicache_package(path)
        if own in COMMANDS or path.name == "command.py":
            continue  # commands compose everything below them
        assert own in RANK, f"{own}: place this hicache package in HICACHE_LAYERS"
        rank = RANK[own]
        bad = sorted(t for t in hicache_imports(path) - {own}
                     if RANK.get(t, TOP) >= rank)
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_the_layer_checker_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("from hicache.scheduler.scheduler import Scheduler\nimport hicache.tree\n")
    assert hicache_imports(bad) == {"scheduler", "tree"}
