"""The interpreter-lock microbenchmark: the lane's lost time per burst is a line in the
burst's length (slope: 1 - its speed, intercept: its wake-up), and a real measurement
fills every figure within its bounds (no timing assertions: the box is shared)."""

from __future__ import annotations

import pytest
import torch

from gpu_backend.calib_gil import measure_interpreter, speeds


def test_speed_and_wake_come_from_two_burst_lengths():
    wake, lane_speed = 45e-6, 0.2
    runs = [(0.9, (1 - lane_speed) * b + wake, b) for b in (1e-4, 1e-3)]
    driver, lane, w = speeds(*runs)
    assert driver == pytest.approx(0.9)
    assert lane == pytest.approx(lane_speed) and w == pytest.approx(wake)
    # a lane that stops for the whole burst and a wake-up: speed 0 (clamped later)
    _, lane, w = speeds((1.0, 1e-4 + wake, 1e-4), (1.0, 1e-3 + wake, 1e-3))
    assert lane == pytest.approx(0.0, abs=1e-12) and w == pytest.approx(wake)


def test_a_real_measurement_fills_every_figure():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        got = measure_interpreter(repeats=1)
    finally:
        torch.set_num_threads(threads)
    assert set(got) == {"driver_python", "lane_python", "driver_torch", "lane_torch",
                        "lanes", "wake_s"}
    assert all(0.01 <= v <= 1.0 for k, v in got.items() if k != "wake_s")
    # a wake-up is a scheduler's latency: a second would be a unit slip, not load (one
    # run on a loaded 2-core box measured 0.106 s, so no tighter bound is safe here)
    assert 0.0 <= got["wake_s"] < 1.0
