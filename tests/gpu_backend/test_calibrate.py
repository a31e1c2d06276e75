"""Calibration on CPU yields a profile in the shared hardware schema: copy tables, the
compute and host grids the simulator fits, in-situ figures, every number with a source."""

from __future__ import annotations

import pytest
import torch
import yaml

from gpu_backend.calibrate import calibrate, to_yaml
from gpu_backend.shapes import ModelShape
from sim.hardware.profile import load_profile


@pytest.fixture(scope="module")
def calibrated() -> tuple[dict, dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return calibrate(ModelShape.tiny(), "cpu", page_size=8)
    finally:
        torch.set_num_threads(threads)


def test_cpu_calibration_fills_the_schema_and_round_trips_through_yaml(calibrated):
    prof, src = calibrated
    for section, keys in {"gpu": ["bf16_flops", "kernel_launch_s"],
                          "pcie": ["h2d_bytes_per_s", "d2h_bytes_per_s", "call_overhead_s",
                                   "bidirectional_bytes_per_s", "half_efficiency_bytes"],
                          "io_kernel": ["bytes_per_s", "compute_slowdown"],
                          "cpu": ["op_submit_s", "op_gap_s", "layer_launch_s",
                                  "copy_issue_s", "scheduler_step_s", "wakeup_s",
                                  "admit_step_s", "insert_step_s", "finish_step_s"]}.items():
        assert all(prof[section][k] >= 0 for k in keys)
    cal = prof["calibrated"]
    assert cal["device"] == "cpu"
    for table in (cal["copy"]["h2d"], cal["copy"]["d2h"]):
        sizes = [row[0] for row in table]
        assert sizes == sorted(sizes) and all(t > 0 for _, t in table)
    assert src["pcie.h2d_bytes_per_s"].startswith("measured")
    text = to_yaml(prof, src)
    assert "# default: docs/SOURCES.md" in text and "# measured" in text
    assert yaml.safe_load(text) == prof
    assert load_profile(yaml.safe_load(text)).calibrated.compute["attention"] == "padded"


def test_compute_grids_vary_tokens_context_and_batch_and_take_real_time(calibrated):
    prof, _ = calibrated
    c = prof["calibrated"]["compute"]
    pre, dec = c["prefill"], c["decode"]
    assert len({r[1] for r in pre}) >= 3 and len({r[2] for r in pre}) >= 3  # tokens, context
    assert len({r[0] for r in dec}) >= 3 and len({r[2] for r in dec}) >= 3  # batch, context
    assert all(len(r) == 4 and r[3] > 0 for r in pre + dec)
    # more work costs more: the largest prefill point outweighs the smallest by far
    assert max(pre, key=lambda r: r[1] * (r[1] + r[2]))[3] > 3 * min(pre, key=lambda r: r[1])[3]
    assert [r[0] for r in c["sample"]] == sorted(r[0] for r in c["sample"])
    host = prof["calibrated"]["host"]
    assert len(host["setup"]) == len(pre) + len(dec) and len(host["prepare"]) == 6
    assert all(len(r) == 3 and r[2] > 0 for r in host["prepare"])


def test_in_situ_figures_and_the_driver_times_are_measured(calibrated):
    prof, src = calibrated
    ins = prof["calibrated"]["in_situ"]
    assert ins["batches"] >= 20
    assert 0.3 < ins["compute_scale"] < 5 and 0.3 < ins["sample_scale"] < 5
    assert ins["first_op_s"] >= 0 and ins["setup_s"] >= 0
    cpu = prof["cpu"]
    assert 1e-6 < cpu["scheduler_step_s"] < 0.05  # a real measurement, not the 2e-4 default
    assert 1e-6 < cpu["wakeup_s"] < 0.05  # the driver waking up takes time on any box
    assert cpu["layer_launch_s"] == 0.0 and cpu["copy_issue_s"] == 0.0  # CPU: workers do it
    assert src["cpu.scheduler_step_s"].startswith("measured: median from the driver's wake")
    # CPU lanes are threads under one GIL: their speeds beside the driver are measured
    gil = cpu["interpreter"]
    assert set(gil) == {"driver_python", "lane_python", "driver_torch", "lane_torch",
                        "lanes", "wake_s"}
    assert all(0.01 <= v <= 1 for k, v in gil.items() if k != "wake_s") and gil["wake_s"] >= 0
    assert load_profile({**prof, "name": "t"}).host_cpu.interpreter is not None
    shape = prof["calibrated"]["shape"]
    assert shape == ModelShape.tiny().to_mapping()
    assert ModelShape.from_mapping(shape).to_mapping() == shape  # round-trips


def test_calibration_can_keep_the_default_step_time():
    prof, src = calibrate(ModelShape.tiny(), "cpu", page_size=16, scheduler=False)
    assert prof["cpu"]["scheduler_step_s"] == 2.0e-4 and "cpu.scheduler_step_s" not in src
    assert "in_situ" not in prof["calibrated"]
