"""The CLI starts without simpy or torch, and names what a command needs."""

from __future__ import annotations

import subprocess
import sys


def _run_without(blocked: str, *args: str) -> subprocess.CompletedProcess:
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] == {blocked!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from hicache.cli import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_run_without_simpy_says_to_install_simpy() -> None:
    r = _run_without("simpy", "run", "scenarios/quick.yaml", "--out", "x")
    assert r.returncode == 2
    assert "needs the Python package 'simpy'" in r.stderr


def test_replay_works_without_torch_or_simpy(tmp_path) -> None:  # noqa: ANN001
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival": 0, "tokens": [1, 2, 3, 4], "output_len": 1}\n')
    r = _run_without("torch", "replay", "--trace", str(trace), "--format", "tokens",
                     "--page-size", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert '"requests": 1' in r.stdout
