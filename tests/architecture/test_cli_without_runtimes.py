"""The CLI starts without simpy or torch, and names what a command needs."""

from __future__ import annotations

import subprocess

from tests.architecture.blocking import run_without


def _run_without(blocked: str, *args: str) -> subprocess.CompletedProcess:
    return run_without((blocked,), f"from hicache.cli import main\nsys.exit(main({list(args)!r}))")


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
