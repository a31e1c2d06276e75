"""Calibration on CPU yields a profile in the shared hardware schema."""

from __future__ import annotations

import yaml

from gpu_backend.calibrate import calibrate, to_yaml
from gpu_backend.shapes import ModelShape


def test_cpu_calibration_fills_the_schema_and_round_trips_through_yaml():
    prof, src = calibrate(ModelShape.tiny(), "cpu", page_size=8)
    for section, keys in {"gpu": ["bf16_flops", "kernel_launch_s"],
                          "pcie": ["h2d_bytes_per_s", "d2h_bytes_per_s", "call_overhead_s",
                                   "bidirectional_bytes_per_s", "half_efficiency_bytes"],
                          "io_kernel": ["bytes_per_s", "compute_slowdown"]}.items():
        assert all(prof[section][k] >= 0 for k in keys)
    cal = prof["calibrated"]
    assert cal["device"] == "cpu"
    for table in (cal["copy"]["h2d"], cal["copy"]["d2h"], cal["prefill_layer"],
                  cal["decode_layer"]):
        sizes = [row[0] for row in table]
        assert sizes == sorted(sizes) and all(t > 0 for _, t in table)
    assert src["pcie.h2d_bytes_per_s"].startswith("measured")
    text = to_yaml(prof, src)
    assert "# default: docs/SOURCES.md" in text and "# measured" in text
    assert yaml.safe_load(text) == prof
