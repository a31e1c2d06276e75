"""The measure -> validate loop on CPU: calibrate this box, run a small L1+L2 scenario on
the TorchRuntime three times, predict it with the simulator and score the prediction.

Scenario: scenarios/validation/cpu_loop.yaml (tiny shape, 6 chat clients x 3 rounds
arriving at once, one batch in flight, no L3, an L1 of 512 tokens so turns evict to L2 and
load back): both runtimes decide alike, so batches and requests match by id.

Bounds: two-sided, so that a predictor of zero (error -1) or of twice the time (+1) fails
them, and wide enough for this shared 2-core box, where other jobs move single runs by
30-50 % (the noise floor is reported beside every error) and stretch TTFT, a sum of thread
wake-ups, most: at a load average of 5 the TTFT error reached -0.58 (step: -0.25).
Accuracy targets live in benchmarks/fidelity_cpu.py, not here: the test checks the loop
and that the scoring discriminates, on the measured data itself (the zero and 2x predictor
test).
Why the old version was flaky: it compared one run with one-sided bounds; a loaded run
fell outside them. Now the reference is the per-batch median of three runs, measured at
real-time priority where permitted (``--priority fifo``: other jobs cannot preempt the
runtime's threads; without the permission it runs as started).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hicache.cli import main
from hicache.report.frames import read_timeline_parquet
from validation.compare import Run, compare
from validation.runner import load_measured
from validation.targets import Targets, comparison_checks

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios/validation/cpu_loop.yaml"
BOUNDS = Targets(step=0.6, step_p90=None, ttft=0.8, hidden=None)
FIELDS = {"scored", "decisions_equal", "decisions", "runs", "batches", "step_time", "ops",
          "ttft", "load_hidden_fraction", "summary", "noise", "shape", "profile", "variant",
          "warnings", "scheduler_step_s"}


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> tuple[dict, Path]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tmp = tmp_path_factory.mktemp("loop")
        assert main(["measure", str(SCENARIO), "--device", "cpu", "--out",
                     str(tmp / "measured"), "--repeats", "3", "--priority", "fifo"]) == 0
        assert main(["validate", "--measured", str(tmp / "measured"), "--out",
                     str(tmp / "out")]) == 0
        return json.loads((tmp / "out" / "cpu_loop" / "comparison.json").read_text()), tmp
    finally:
        torch.set_num_threads(threads)


def test_the_loop_writes_every_field_and_file(loop):
    cmp, tmp = loop
    assert FIELDS <= set(cmp)
    for key in ("median_rel_error", "median_abs_rel_error", "p90_abs_rel_error"):
        assert key in cmp["step_time"] and key in cmp["ttft"]["per_request"]
    out = tmp / "out" / "cpu_loop"
    for name in ("comparison.json", "comparison.csv", "steps.csv", "ttft.csv", "overlay.png",
                 "residuals.png"):
        assert (out / name).stat().st_size > 0
    assert (tmp / "out" / "validation.json").is_file()
    assert cmp["shape"] == "tiny" and cmp["warnings"] == []  # calibrated with this shape
    measured = tmp / "measured"
    for name in ("measured.json", "environment.json", "profile.yaml"):
        assert (measured / name).is_file()
    assert cmp["runs"]["measured"] == 3 and cmp["noise"]["scored"]


def test_both_runtimes_decide_the_same_and_number_batches_alike(loop):
    cmp, _ = loop
    assert cmp["scored"] and cmp["decisions_equal"] is True
    assert cmp["decisions"]["predicted"] == cmp["decisions"]["measured"] > 0
    b = cmp["batches"]
    assert b["predicted"] == b["measured"] == b["matched"] > 10
    ops = {(o["lane"], o["op"]) for o in cmp["ops"] if o["n_matched_batches"]}
    assert {("compute", "prefill"), ("compute", "decode"), ("compute", "sample"),
            ("cpu", "prepare"), ("cpu", "execute"), ("h2d", "load"),
            ("d2h", "backup")} <= ops  # L1+L2: loads and backups happened on both sides


@pytest.mark.slow  # measured wall time on this box: a loaded CI runner can push it out of
# bounds (it failed once at load 5 beside other jobs); the accuracy targets live in
# benchmarks/fidelity_cpu.py, and the default suite keeps the loop and discrimination tests
def test_prediction_errors_are_within_two_sided_bounds(loop):
    cmp, _ = loop
    checks = {c.name: c for c in comparison_checks("cpu_loop", cmp, BOUNDS)}
    assert checks["step"].ok and checks["ttft"].ok, (cmp["step_time"], cmp["ttft"],
                                                     cmp["noise"])
    for o in cmp["ops"]:
        if o["lane"] == "compute" and o["n_matched_batches"]:
            assert abs(o["median_rel_error"]) <= BOUNDS.step, o


def test_the_bounds_reject_a_zero_or_a_2x_predictor(loop):
    """The same bounds on the measured data, with predictions scaled by 0 and by 2. Scored
    against the run they scale (errors exactly -1 and +1): the other repeats ran at another
    moment, and on a loaded machine one repeat can take twice as long as another."""
    _, tmp = loop
    ms = load_measured(tmp / "measured").scenarios[0]
    runs = [ms.runs[0].run()]
    for factor in (0.0, 2.0):
        tl = read_timeline_parquet(tmp / "measured" / "cpu_loop" / "run0" / "timeline.parquet")
        tl[["start", "end", "duration"]] *= factor
        req = runs[0].requests.copy()
        req["ttft"] *= factor
        cmp = compare(Run(tl, req, runs[0].decisions), runs)
        checks = {c.name: c for c in comparison_checks("cpu_loop", cmp, BOUNDS)}
        assert checks["step"].ok is False and checks["ttft"].ok is False, factor


# --- validate's output folder follows run's rules (hicache.report.outputs) --------------

def _validate(tmp: Path, out: Path, *extra: str) -> int:
    return main(["validate", "--measured", str(tmp / "measured"), "--out", str(out), *extra])


def test_validate_never_writes_into_an_existing_folder(loop, capsys):
    _, tmp = loop
    out = tmp / "out"
    assert json.loads((out / "run.json").read_text())["command"] == "validate"
    before = (out / "validation.json").stat().st_mtime_ns
    assert _validate(tmp, out) == 2
    assert "already holds a previous run; pass --overwrite" in capsys.readouterr().err
    assert (out / "validation.json").stat().st_mtime_ns == before
    mine = tmp / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert _validate(tmp, mine, "--overwrite") == 2
    assert "not a hicache-lab output" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    (out / "stale.txt").write_text("from an older run")
    assert _validate(tmp, out, "--overwrite") == 0
    assert not (out / "stale.txt").exists() and (out / "cpu_loop" / "comparison.json").exists()


def test_an_interrupted_validate_exits_130_and_leaves_nothing(loop, capsys, monkeypatch):
    import validation.runner

    _, tmp = loop

    def interrupted(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(validation.runner, "validate_scenario", interrupted)
    out = tmp / "cut" / "v"
    assert _validate(tmp, out) == 130
    assert "interrupted; no complete-looking output" in capsys.readouterr().err
    assert list((tmp / "cut").iterdir()) == []


def test_validate_refuses_an_unfinished_measurement_and_unsafe_folder_names(
        loop, capsys, tmp_path):  # fmt: skip
    import shutil

    _, tmp = loop
    measured = tmp_path / "measured"
    shutil.copytree(tmp / "measured", measured)
    env = json.loads((measured / "environment.json").read_text())
    (measured / "environment.json").write_text(json.dumps({**env, "finished": False}))
    args = ["validate", "--measured", str(measured), "--out", str(tmp_path / "v")]
    assert main(args) == 2
    assert "did not finish" in capsys.readouterr().err and not (tmp_path / "v").exists()
    assert main([*args, "--partial"]) == 0
    assert json.loads((tmp_path / "v" / "validation.json").read_text())[
        "measurement_complete"] is False
    man = json.loads((measured / "measured.json").read_text())
    man["scenarios"][0]["dir"] = ".."
    (measured / "measured.json").write_text(json.dumps(man))
    assert main(["validate", "--measured", str(measured), "--partial", "--out",
                 str(tmp_path / "w")]) == 2
    assert "scenario folder '..' is not a plain folder name" in capsys.readouterr().err


def test_measure_refuses_an_existing_folder_before_calibrating(loop, capsys, tmp_path):
    _, tmp = loop
    args = ["measure", str(SCENARIO), "--device", "cpu", "--out", str(tmp / "measured")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "already holds a measurement" in err and "--overwrite" in err
    (tmp_path / "other.txt").write_text("x")
    assert main([*args[:-1], str(tmp_path), "--overwrite"]) == 2
    assert "not a measured folder" in capsys.readouterr().err
    assert main(["measure", str(SCENARIO), str(SCENARIO), "--device", "cpu", "--out",
                 str(tmp_path / "m")]) == 2
    assert "several scenarios measure into ['cpu_loop']" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_a_measured_run_that_loses_requests_exits_1_without_a_traceback(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["measure", str(SCENARIO), "--device", "cpu", "--no-calibrate", "--repeats",
                 "1", "--out", str(out), "--set", "run.max_sim_time=0.001"]) == 1
    err = capsys.readouterr().err
    assert "requests did not finish" in err and "Traceback" not in err
    assert main(["validate", "--measured", str(out), "--out", str(tmp_path / "v")]) == 2
    assert "the measurement did not finish" in capsys.readouterr().err
    other = SCENARIO.with_name("cpu_decode_batch.yaml")  # a good run appended after it
    assert main(["measure", str(other), "--device", "cpu", "--no-calibrate", "--repeats",
                 "1", "--out", str(out), "--append"]) == 0
    assert json.loads((out / "environment.json").read_text())["finished"] is False


def test_validate_of_a_scenario_whose_measurement_loses_requests_exits_1_and_writes_nothing(
        tmp_path, capsys):  # fmt: skip
    profile = SCENARIO.parents[1] / "hardware" / "h100-sxm.yaml"  # kept, not calibrated
    rc = main(["validate", str(SCENARIO), "--profile", str(profile), "--device", "cpu",
               "--repeats", "1", "--set", "run.max_sim_time=0.001", "--out",
               str(tmp_path / "v")])
    err = capsys.readouterr().err
    assert rc == 1 and "requests did not finish" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
