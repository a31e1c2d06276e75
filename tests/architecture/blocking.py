"""Run Python code in a fresh interpreter where some packages cannot be imported.

    run_without(("pydantic", "simpy"), "import gpu_backend.driver")

A meta-path finder placed first refuses the named top-level packages (and their
submodules) with ModuleNotFoundError, as if they were not installed: the way the GPU
machine (no simpy, no pydantic) or a CLI user without a runtime's packages sees them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prelude(blocked: Sequence[str]) -> str:
    """Code that makes ``blocked`` unimportable in the interpreter that runs it."""
    return (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {tuple(blocked)!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
    )


def run_without(blocked: Sequence[str], code: str, *, timeout: float = 120,
                cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``code`` after :func:`prelude` in a subprocess; stdout and stderr captured."""
    return subprocess.run([sys.executable, "-c", prelude(blocked) + code],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
