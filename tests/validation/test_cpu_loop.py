"""The calibrate -> validate loop on CPU: measure this box into a profile, then predict a
small L1+L2 run with it and compare with the TorchRuntime's measurement of the same run.

Scenario (written here): tiny shape, 6 chat clients x 3 rounds arriving at once, one batch
in flight, no L3, an L1 of 512 tokens so turns evict to L2 and load back. Under these
conditions the control plane decides the same on both runtimes, so all batches match by id.

Tolerances, measured on this 2-core box (torch limited to one intra-op thread, below;
13 runs of calibrate+validate, then 5 consecutive `pytest tests/validation` runs, all pass):
- median |relative error| of per-batch step time: observed 0.26-0.43, asserted <= 1.0
  (the simulator underpredicts: the runtime's Python gaps between layers are not modelled);
- compute ops (prefill, decode) per-batch duration: observed 0.22-0.51, asserted <= 1.0;
- TTFT p50/p90 relative error: observed -0.19 to -0.75, asserted |err| <= 0.85. Calibrating
  cpu.scheduler_step_s (0.47-0.53 ms here instead of the 0.2 ms default) did not move it:
  6 paired runs, default -0.60..-0.67, calibrated -0.62..-0.65 (docs/VALIDATION.md). The
  simulator charges that time *after* submitting a step's batches, hidden under them,
  while the real loop spends it before the next batch starts;
- copy ops (h2d load, d2h backup) are NOT bounded: observed 0.9-6x overprediction, a known
  mismatch between the calibration's copy tables (one Mover call over all layers per row)
  and sim.calibration's per-call fit (see the validation report).
Why one thread: with torch's default two intra-op threads and another process on the box,
thread barriers lose whole scheduler ticks and the calibrated layer times come out up to
100x too high (observed: 8-64 ms instead of 0.1-0.5 ms), so the errors say nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpu_backend.calibrate import calibrate, to_yaml
from gpu_backend.shapes import ModelShape
from hicache.cli import main

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios/validation/cpu_loop.yaml"
FIELDS = {"decisions_equal", "decisions", "batches", "step_time", "ops", "ttft",
          "load_hidden_fraction", "summary", "device", "shape", "profile", "variant",
          "warnings", "scheduler_step_s"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, Path]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tmp = tmp_path_factory.mktemp("validate")
        prof, src = calibrate(ModelShape.tiny(), "cpu", page_size=16)
        (tmp / "cpu.yaml").write_text(to_yaml(prof, src))
        out = tmp / "out"
        rc = main(["validate", str(SCENARIO), "--profile", str(tmp / "cpu.yaml"),
                   "--device", "cpu", "--out", str(out)])
        assert rc == 0
        return json.loads((out / "comparison.json").read_text()), out
    finally:
        torch.set_num_threads(threads)


def test_the_loop_writes_every_field_and_file(run):
    cmp, out = run
    assert FIELDS <= set(cmp)
    assert {"median_abs_rel_error", "predicted_median_s", "measured_median_s"} <= set(
        cmp["step_time"])
    assert set(cmp["ttft"]) == {"p50", "p90"}
    assert set(cmp["load_hidden_fraction"]) == {"predicted", "measured"}
    for name in ("comparison.json", "comparison.csv", "steps.csv", "overlay.png"):
        assert (out / name).stat().st_size > 0
    assert cmp["device"] == "cpu" and cmp["shape"] == "tiny"
    assert cmp["warnings"] == []  # the profile was calibrated with this very shape


def test_the_simulator_uses_the_calibrated_scheduler_step(run):
    cmp, _ = run
    st = cmp["scheduler_step_s"]
    assert st["predicted"] != 2.0e-4  # not the profile default: measured by calibrate
    assert 0.2 < st["predicted"] / st["measured"] < 5  # same quantity, two runs of this box


def test_both_runtimes_decide_the_same_and_number_batches_alike(run):
    cmp, _ = run
    assert cmp["decisions_equal"] is True
    assert cmp["decisions"]["predicted"] == cmp["decisions"]["measured"] > 0
    b = cmp["batches"]
    assert b["predicted"] == b["measured"] == b["matched"] > 10
    ops = {(o["lane"], o["op"]) for o in cmp["ops"] if o["n_matched_batches"]}
    assert {("compute", "prefill"), ("compute", "decode"), ("h2d", "load"),
            ("d2h", "backup")} <= ops  # L1+L2: loads and backups happened on both sides


def test_prediction_errors_are_within_the_measured_cpu_tolerance(run):
    cmp, _ = run
    assert cmp["step_time"]["median_abs_rel_error"] <= 1.0
    for o in cmp["ops"]:
        if o["lane"] == "compute":
            assert o["median_abs_rel_error"] <= 1.0, o
    for q in ("p50", "p90"):
        assert abs(cmp["ttft"][q]["rel_error"]) <= 0.85, cmp["ttft"]
