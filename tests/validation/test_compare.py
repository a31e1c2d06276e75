"""The comparison arithmetic on hand-made timelines: a step spans a batch's own rows from
when it could start, batches and requests match by id, runs are scored only when their
decisions agree, several measured runs give a median reference and a noise floor."""

from __future__ import annotations

import pytest

from hicache.report.frames import requests_frame, timeline_frame
from validation.compare import (
    DecisionsDiffer,
    Run,
    compare,
    comparison_rows,
    error_stats,
    first_mismatch,
    match_steps,
    noise_floor,
    rel_error,
    step_times,
)


def rows(*spec):
    """(lane, op, batch, layer, start, end, bytes) -> timeline frame."""
    return timeline_frame([{"lane": ln, "op": op, "batch": b, "request": -1, "layer": la,
                            "start": s, "end": e, "bytes": n}
                           for ln, op, b, la, s, e, n in spec])


def reqs(*ttfts):
    return requests_frame([{"rid": i, "arrival": 0.0, "first_token": t, "finish": t + 1,
                            "prompt_tokens": 8, "output_tokens": 2}
                           for i, t in enumerate(ttfts)])


DEC = [("admit", 1), ("finish", 1)]
PRED = rows(("compute", "prefill", 1, -1, 0.0, 2.0, 0),
            ("compute", "decode", 2, -1, 2.0, 3.0, 0),
            ("h2d", "load", 2, 0, 1.0, 2.5, 64))
# the runtime writes one compute row per layer: batch 1 spans 0..4 with a gap
MEAS = rows(("compute", "prefill", 1, 0, 0.0, 1.0, 0),
            ("compute", "prefill", 1, 1, 3.0, 4.0, 0),
            ("compute", "decode", 2, 0, 4.0, 5.0, 0),
            ("h2d", "load", 2, 0, 0.0, 0.5, 64),
            ("h2d", "load", 2, 1, 0.5, 1.0, 64))


def test_rel_error_is_relative_to_the_measurement_and_undefined_at_zero():
    assert rel_error(3.0, 2.0) == pytest.approx(0.5)
    assert rel_error(1.0, 2.0) == pytest.approx(-0.5)
    assert rel_error(1.0, 0.0) is None and rel_error(None, 1.0) is None


def test_a_step_includes_loads_that_run_first_but_not_waiting_for_the_batch_before():
    tl = rows(("cpu", "prepare", 1, -1, 0.0, 0.1, 0),
              ("compute", "prefill", 1, 0, 0.2, 1.0, 0),
              ("h2d", "load", 2, -1, 0.5, 1.5, 64),  # issued during batch 1 ...
              ("compute", "decode", 2, 0, 1.5, 2.0, 0),  # ... compute waits for it
              ("h2d", "load", 3, -1, 2.5, 3.0, 64),  # all-layers-first, after batch 2
              ("compute", "decode", 3, 0, 3.0, 3.5, 0),
              ("d2h", "backup", 3, -1, 3.5, 9.0, 64))  # not part of any step
    st = step_times(tl)["step_s"]
    # batch 1 from its prepare; batch 2 from batch 1's end (its load hid 0.5 s under it)
    # to its own end; batch 3 from its load's start
    assert st.to_dict() == pytest.approx({1: 1.0, 2: 1.0, 3: 1.0})


def test_steps_match_by_batch_id():
    m = match_steps(PRED, MEAS)
    assert m["batch"].tolist() == [1, 2]
    assert m["predicted_s"].tolist() == [2.0, 1.0]
    # batch 2 measured: its loads start at 0 but batch 1 computes until 4
    assert m["measured_s"].tolist() == [4.0, 1.0]
    assert m["rel_error"].tolist() == [-0.5, 0.0]


def test_error_stats_are_signed_median_median_abs_and_p90_abs():
    s = error_stats([-0.5, 0.1, 0.2, 0.3, None])
    assert s["n"] == 4 and s["median_rel_error"] == pytest.approx(0.15)
    assert s["median_abs_rel_error"] == pytest.approx(0.25)
    assert s["p90_abs_rel_error"] == pytest.approx(0.44)
    assert error_stats([])["median_abs_rel_error"] is None


def test_compare_reports_ops_ttft_per_request_hidden_loads():
    c = compare(Run(PRED, reqs(1.0, 2.0), DEC), Run(MEAS, reqs(2.0, 2.0), DEC))
    assert c["scored"] and c["batches"] == {"predicted": 2, "measured": 2, "matched": 2}
    assert c["step_time"]["median_abs_rel_error"] == pytest.approx(0.25)
    ops = {(o["lane"], o["op"]): o for o in c["ops"]}
    load = ops[("h2d", "load")]  # per batch: 1.5 s predicted vs 0.5 + 0.5 s measured
    assert load["n_matched_batches"] == 1 and load["median_rel_error"] == pytest.approx(0.5)
    assert c["ttft"]["per_request"]["n"] == 2
    assert c["ttft"]["per_request"]["median_rel_error"] == pytest.approx(-0.25)  # -0.5, 0
    # predicted load 1.0..2.5 overlaps compute 1.0..2.5 fully; measured 0..1 overlaps 0..1
    assert c["load_hidden_fraction"] == {"predicted": 1.0, "measured": 1.0, "abs_diff": 0.0}
    table = comparison_rows(c)
    assert {"step_time", "ttft_per_request", "load_hidden_fraction", "op_duration"} <= set(
        table["quantity"])


def test_runs_that_decided_differently_are_not_scored():
    assert first_mismatch([(1,), (2,)], [(1,), (2,)]) is None
    assert first_mismatch([(1,), (2,)], [(1,), (3,)]) == 1
    with pytest.raises(DecisionsDiffer, match=r"differ at decision 1 of 2/2"):
        compare(Run(PRED, reqs(1.0), DEC), Run(MEAS, reqs(1.0), [("admit", 1), ("x",)]))


def test_several_runs_give_a_median_reference_and_a_noise_floor():
    fast = rows(("compute", "prefill", 1, 0, 0.0, 1.0, 0))
    slow = rows(("compute", "prefill", 1, 0, 0.0, 3.0, 0))
    mid = rows(("compute", "prefill", 1, 0, 0.0, 2.0, 0))
    odd = Run(mid, reqs(2.0), [("other",)])  # decided otherwise: left out of the reference
    runs = [odd, Run(mid, reqs(2.0), DEC), Run(fast, reqs(1.0), DEC),
            Run(slow, reqs(3.0), DEC)]
    c = compare(Run(mid, reqs(2.0), DEC), runs)  # the first run raced otherwise: not used
    assert c["runs"] == {"measured": 4, "reference": 3, "all_decided_alike": False}
    assert c["step_time"]["median_abs_rel_error"] == 0.0  # median of 1, 2, 3 is 2
    runs = runs[1:] + runs[:1]
    n = noise_floor(runs)
    assert n["scored"] and n["pairs"] == 2
    assert n["step_time"]["median_abs_rel_error"] == pytest.approx(0.5)  # |1-2|/2, |3-2|/2
    assert not noise_floor(runs[:1])["scored"]
    assert not noise_floor([runs[0], odd])["scored"]


def test_compare_of_empty_runs_does_not_raise():
    c = compare(Run(rows(), requests_frame([]), []), Run(rows(), requests_frame([]), []))
    assert c["batches"]["matched"] == 0 and c["step_time"]["median_abs_rel_error"] is None
