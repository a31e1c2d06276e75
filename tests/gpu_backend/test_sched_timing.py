"""The driver thread's gaps are read from a run's timeline: a batch's completion to the
driver's first scheduler step (its wake-up), and from then to the next batch's
prepare_batch, with what that step had to do; calibration turns them into step costs."""

from __future__ import annotations

import pytest

import gpu_backend.sched_timing as st
from gpu_backend.calib_insitu import loop_batches, step_costs
from gpu_backend.driver import run_scenario
from gpu_backend.shapes import ModelShape
from hicache.timeline import Timeline


def test_gaps_come_from_the_cpu_schedule_and_compute_rows():
    tl = Timeline()
    for b, t, op in ((1, 0.0, "prefill"), (2, 1.0, "decode"), (3, 2.0, "prefill")):
        tl.record("cpu", "prepare", t, t + 0.1, batch=b)
        tl.record("cpu", "execute", t + 0.1, t + 0.2, batch=b)
        tl.record("compute", op, t + 0.25, t + 0.6, batch=b, layer=0)
        tl.record("compute", "sample", t + 0.6, t + 0.7, batch=b)
        tl.record("cpu", "schedule", t + 0.75, t + 0.8)  # the driver woke 50 ms later
    gaps = st.driver_gaps(tl, finishes=[1.7])  # a request finished with batch 2
    assert [g.wake for g in gaps] == [pytest.approx(0.05)] * 2
    assert [g.step for g in gaps] == [pytest.approx(0.25)] * 2  # 0.75 -> 1.0, 1.75 -> 2.0
    assert [(g.after_prefill, g.admits, g.finished) for g in gaps] == [
        (True, False, 0), (False, True, 1)]
    plain = st.driver_gaps(tl.__class__())  # no rows, no gaps
    assert plain == []


def test_without_schedule_rows_the_whole_gap_is_the_step():
    tl = Timeline()
    for b, t in ((1, 0.0), (2, 1.0)):
        tl.record("cpu", "prepare", t, t + 0.1, batch=b)
        tl.record("compute", "decode", t + 0.25, t + 0.7, batch=b, layer=0)
    (gap,) = st.driver_gaps(tl)
    assert gap.wake is None and gap.step == pytest.approx(0.3)


def test_step_costs_split_the_step_by_what_it_did():
    G = st.Gap
    base, fin, ins, adm = 3e-5, 1e-4, 1.4e-4, 2e-4
    gaps = ([G(5e-5, base, False, False, 0)] * 5
            + [G(5e-5, base + fin * k, False, False, k) for k in (1, 2, 1)]
            + [G(6e-5, base + ins, True, False, 0)] * 3
            + [G(5e-5, base + fin + adm, False, True, 1)] * 3)
    got = step_costs(gaps)
    assert got == pytest.approx({"wakeup_s": 5e-5, "scheduler_step_s": base,
                                 "finish_step_s": fin, "insert_step_s": ins,
                                 "admit_step_s": adm})


def test_the_runtime_records_the_driver_rows_and_batch_shapes_in_situ_reads():
    res = run_scenario(dict(st.SCENARIO), device="cpu", shape=ModelShape.tiny())
    batches = loop_batches(res)
    assert len(batches) >= 20
    assert all(b.slices for b in batches)
    assert sum(b.layer0_s is not None and b.layer0_s > 0 for b in batches) >= 10
    steps = [r for r in res.timeline.rows if r.lane == "cpu" and r.op == "schedule"]
    assert len(steps) >= 2 * len(batches)  # a step before each batch, and one after
    gaps = st.driver_gaps(res.timeline, [r["finish"] for r in res.records])
    assert len(gaps) >= 20 and all(g.step >= 0 and g.wake >= 0 for g in gaps)
    assert sum(g.admits for g in gaps) >= 5 and sum(g.finished for g in gaps) >= 5
