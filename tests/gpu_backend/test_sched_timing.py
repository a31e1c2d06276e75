"""``cpu.scheduler_step_s`` is measured: the median wall time of the torch driver's working
steps on a short run, written into the profile with a source comment."""

from __future__ import annotations

import pytest
import yaml

import gpu_backend.sched_timing as st
from gpu_backend.calibrate import calibrate, to_yaml
from gpu_backend.driver import run_scenario
from gpu_backend.shapes import ModelShape


def test_the_driver_times_every_step_and_marks_the_working_ones():
    res = run_scenario(dict(st.SCENARIO), device="cpu", shape=ModelShape.tiny())
    steps, work = res.extra["step_s"], res.extra["work_step_s"]
    assert len(steps) == res.extra["steps"] > len(work) > 0
    assert sum(steps) == pytest.approx(res.extra["scheduler_s"])
    assert all(t > 0 for t in steps)


def test_the_calibrated_value_is_the_median_of_working_steps(monkeypatch):
    seen = []

    def fake_run(d, **kw):
        seen.append(kw["device"])
        return type("R", (), {"extra": {"work_step_s": [3.0, 1.0, 2.0] * 10,
                                        "step_s": [0.5] * 40 + [3.0, 1.0, 2.0] * 10}})()

    monkeypatch.setattr("gpu_backend.driver.run_scenario", fake_run)
    t = st.measure_scheduler_step(ModelShape.tiny(), "cpu", repeats=2)
    assert (t.median_s, t.all_median_s, t.steps, t.total_steps) == (2.0, 0.5, 60, 140)
    assert seen == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="need 100"):
        st.measure_scheduler_step(ModelShape.tiny(), "cpu", repeats=1, min_steps=100)


def test_calibrate_writes_the_step_time_and_the_shape_with_sources():
    prof, src = calibrate(ModelShape.tiny(), "cpu", page_size=16)
    step = prof["cpu"]["scheduler_step_s"]
    assert 1e-6 < step < 0.05  # a real measurement of this box, not the 2e-4 default
    assert src["cpu.scheduler_step_s"].startswith("measured: median of")
    shape = prof["calibrated"]["shape"]
    assert shape == ModelShape.tiny().to_mapping()
    assert ModelShape.from_mapping(shape).to_mapping() == shape  # round-trips
    text = to_yaml(prof, src)
    line = next(x for x in text.splitlines() if "scheduler_step_s" in x)
    assert "# measured: median of" in line
    assert yaml.safe_load(text)["calibrated"]["shape"]["name"] == "tiny"


def test_calibration_can_keep_the_default_step_time():
    prof, src = calibrate(ModelShape.tiny(), "cpu", page_size=16, scheduler=False)
    assert prof["cpu"]["scheduler_step_s"] == 2.0e-4 and "cpu.scheduler_step_s" not in src
