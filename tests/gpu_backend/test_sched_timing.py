"""The driver thread's gaps are read from a run's timeline: a batch's completion to the
next batch's prepare_batch, and execute_batch's end to the batch's first device op."""

from __future__ import annotations

import pytest

import gpu_backend.sched_timing as st
from gpu_backend.calib_insitu import loop_batches
from gpu_backend.driver import run_scenario
from gpu_backend.shapes import ModelShape
from hicache.timeline import Timeline


def test_gaps_come_from_the_cpu_and_compute_rows():
    tl = Timeline()
    for b, t in ((1, 0.0), (2, 1.0)):
        tl.record("cpu", "prepare", t, t + 0.1, batch=b)
        tl.record("cpu", "execute", t + 0.1, t + 0.2, batch=b)
        tl.record("compute", "prefill", t + 0.25, t + 0.6, batch=b, layer=0)
        tl.record("compute", "sample", t + 0.6, t + 0.7, batch=b)
    dec, pre, hand = st.driver_gaps(tl)
    assert dec == [] and pre == [pytest.approx(0.3)]  # 0.7 -> 1.0, before a prefill
    assert hand == [pytest.approx(0.05), pytest.approx(0.05)]


def test_the_runtime_records_the_driver_rows_and_batch_shapes_in_situ_reads():
    res = run_scenario(dict(st.SCENARIO), device="cpu", shape=ModelShape.tiny())
    batches = loop_batches(res)
    assert len(batches) >= 20
    assert all(b.slices and b.layer0_s > 0 and b.execute_s > 0 for b in batches)
    dec, pre, _ = st.driver_gaps(res.timeline)
    assert len(dec) >= 20 and len(pre) >= 5 and all(g >= 0 for g in dec + pre)
