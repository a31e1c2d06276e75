"""The comparison arithmetic on hand-made timelines: step time per batch is the span of its
compute rows, batches match by id, errors are (predicted - measured) / measured."""

from __future__ import annotations

import pytest

from hicache.report.frames import requests_frame, timeline_frame
from validation.compare import compare, comparison_rows, first_mismatch, match_steps, rel_error


def rows(*spec):
    """(lane, op, batch, layer, start, end, bytes) -> timeline frame."""
    return timeline_frame([{"lane": ln, "op": op, "batch": b, "request": -1, "layer": la,
                            "start": s, "end": e, "bytes": n}
                           for ln, op, b, la, s, e, n in spec])


PRED = rows(("compute", "prefill", 1, -1, 0.0, 2.0, 0),
            ("compute", "decode", 2, -1, 2.0, 3.0, 0),
            ("h2d", "load", 2, 0, 1.0, 2.5, 64),
            ("pcie:h2d", "load", 2, 0, 1.0, 2.5, 64))
# the runtime writes one compute row per layer: batch 1 spans 0..4 with a gap
MEAS = rows(("compute", "prefill", 1, 0, 0.0, 1.0, 0),
            ("compute", "prefill", 1, 1, 3.0, 4.0, 0),
            ("compute", "decode", 3, 0, 4.0, 5.0, 0),
            ("h2d", "load", 2, 0, 0.0, 0.5, 64),
            ("h2d", "load", 2, 1, 0.5, 1.0, 64))
REQ = requests_frame([{"rid": 0, "arrival": 0.0, "first_token": 1.0, "finish": 2.0,
                       "prompt_tokens": 8, "output_tokens": 2}])
REQ2 = requests_frame([{"rid": 0, "arrival": 0.0, "first_token": 2.0, "finish": 3.0,
                        "prompt_tokens": 8, "output_tokens": 2}])


def test_rel_error_is_relative_to_the_measurement_and_undefined_at_zero():
    assert rel_error(3.0, 2.0) == pytest.approx(0.5)
    assert rel_error(1.0, 2.0) == pytest.approx(-0.5)
    assert rel_error(1.0, 0.0) is None and rel_error(None, 1.0) is None


def test_steps_span_compute_rows_and_match_by_batch_id():
    m = match_steps(PRED, MEAS)
    assert m["batch"].tolist() == [1]  # batch 2 only predicted, 3 only measured
    assert m["predicted_s"].tolist() == [2.0] and m["measured_s"].tolist() == [4.0]
    assert m["rel_error"].tolist() == [-0.5]


def test_compare_reports_ops_ttft_hidden_loads_and_decisions():
    c = compare(PRED, MEAS, REQ, REQ2, [("admit", 1)], [("admit", 1), ("finish", 1)])
    assert c["batches"] == {"predicted": 2, "measured": 2, "matched": 1}
    assert c["step_time"]["median_abs_rel_error"] == pytest.approx(0.5)
    ops = {(o["lane"], o["op"]): o for o in c["ops"]}
    load = ops[("h2d", "load")]  # per batch: 1.5 s predicted vs 0.5 + 0.5 s measured
    assert load["n_matched_batches"] == 1 and load["median_abs_rel_error"] == pytest.approx(0.5)
    assert ops[("pcie:h2d", "load")]["n_measured"] == 0
    assert ops[("pcie:h2d", "load")]["median_abs_rel_error"] is None
    assert c["ttft"]["p50"]["rel_error"] == pytest.approx(-0.5)
    # predicted load 1.0..2.5 overlaps compute 1.0..2.5 fully; measured 0..1 overlaps 0..1
    assert c["load_hidden_fraction"] == {"predicted": 1.0, "measured": 1.0}
    assert c["decisions_equal"] is False and c["decisions"]["first_mismatch"] == 1
    table = comparison_rows(c)
    assert {"step_time_median_s", "ttft_p90_s", "load_hidden_fraction",
            "decisions_equal"} <= set(table["quantity"])


def test_first_mismatch_finds_the_first_difference():
    assert first_mismatch([(1,), (2,)], [(1,), (2,)]) is None
    assert first_mismatch([(1,), (2,)], [(1,), (3,)]) == 1


def test_compare_of_empty_runs_does_not_raise():
    c = compare(rows(), rows(), requests_frame([]), requests_frame([]), [], [])
    assert c["batches"]["matched"] == 0 and c["step_time"]["median_abs_rel_error"] is None
