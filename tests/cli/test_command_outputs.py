"""Every command that writes follows run's output rules (hicache.report.outputs): replay's
folder and calibrate's profile appear whole or not at all, an existing output is refused
unless --overwrite, and an unwritable one is found before any work. (validate and
measure: tests/validation/test_cpu_loop.py; run: test_run_outputs.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.cli import main
from hicache.report.outputs import OutputError, OutputFile


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival": i, "tokens": [1, 2, 3, 4, i],
                                         "output_len": 1}) + "\n" for i in range(6)))
    return trace


def _replay(trace: Path, out: Path, *extra: str) -> int:
    return main(["replay", "--trace", str(trace), "--format", "tokens", "--page-size", "2",
                 "--capacity-tokens", "64", "--out", str(out), *extra])


def test_replay_refuses_an_existing_output_and_replaces_a_previous_one_whole(
        tmp_path, capsys) -> None:  # fmt: skip
    trace, out = _trace(tmp_path), tmp_path / "out"
    assert _replay(trace, out) == 0
    assert sorted(p.name for p in out.iterdir()) == ["requests.csv", "run.json",
                                                     "summary.json"]
    assert json.loads((out / "run.json").read_text())["command"] == "replay"
    assert _replay(trace, out) == 2
    assert "already holds a previous run; pass --overwrite" in capsys.readouterr().err
    (out / "stale.csv").write_text("")
    assert _replay(trace, out, "--overwrite", "--capacity-tokens", "64,128") == 0
    assert sorted(p.name for p in out.iterdir()) == ["capacity_128", "capacity_64",
                                                     "run.json"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("")
    assert _replay(trace, tmp_path / "mine", "--overwrite") == 2
    assert "not a hicache-lab output" in capsys.readouterr().err


def test_replay_checks_its_output_before_reading_the_trace(tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    assert _replay(tmp_path / "missing.jsonl", tmp_path / "file" / "out") == 2
    assert "cannot write there" in capsys.readouterr().err


def test_an_interrupted_replay_exits_130_and_leaves_nothing(tmp_path, capsys,
                                                            monkeypatch) -> None:
    import hicache.replay.command as command

    def interrupted(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "_replay_one", interrupted)
    trace = _trace(tmp_path)
    assert _replay(trace, tmp_path / "o" / "out") == 130
    assert "interrupted" in capsys.readouterr().err
    assert list((tmp_path / "o").iterdir()) == []


def test_calibrate_refuses_an_existing_profile_before_measuring(tmp_path, capsys,
                                                                monkeypatch) -> None:
    pytest.importorskip("torch")
    import gpu_backend.calibrate

    def never(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("calibrated although the output was refused")

    monkeypatch.setattr(gpu_backend.calibrate, "calibrate", never)
    profile = tmp_path / "p.yaml"
    profile.write_text("mine\n")
    assert main(["calibrate", "--device", "cpu", "--out", str(profile)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert main(["calibrate", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["calibrate", "--device", "cpu", "--out", str(profile / "x.yaml")]) == 2
    assert "cannot write there" in capsys.readouterr().err
    assert profile.read_text() == "mine\n"


def test_an_output_file_is_replaced_whole_or_left_as_it_was(tmp_path, monkeypatch) -> None:
    import os

    final = tmp_path / "p.yaml"
    final.write_text("old\n")
    with pytest.raises(OutputError, match="already exists"):
        OutputFile(final)
    out = OutputFile(final, overwrite=True)

    def cut(*a, **kw):  # noqa: ANN002, ANN003, ANN202 - interrupted before the rename
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(os, "replace", cut)
        with pytest.raises(KeyboardInterrupt):
            out.write_text("new\n")
    assert final.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "p.yaml"]
    out.write_text("new\n")
    assert final.read_text() == "new\n"


def test_an_unwritable_baseline_fails_before_simulating(tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    rc = main(["run", "quick", "--variant", "L1", "--no-progress", "--out",
               str(tmp_path / "o"), "--write-baseline", str(tmp_path / "file" / "b.json")])
    cap = capsys.readouterr()
    assert rc == 2 and "--write-baseline" in cap.err and "cannot write there" in cap.err
    assert "simulating" not in cap.out and not (tmp_path / "o").exists()
