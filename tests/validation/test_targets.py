"""The targets as PASS / FAIL / n/a lines, computed from validate's files (here from
hand-made comparison records and timelines); every bound is two-sided."""

from __future__ import annotations

import json

from hicache.report.frames import timeline_frame
from validation.targets import (
    CPU,
    GPU,
    check_all,
    comparison_checks,
    copy_checks,
    layerwise_check,
    main,
)

MB = 1 << 20


def tl(*spec):
    """(lane, op, batch, layer, start, end, bytes) -> timeline frame."""
    return timeline_frame([{"lane": a, "op": o, "batch": b, "request": -1, "layer": la,
                            "start": s, "end": e, "bytes": n} for a, o, b, la, s, e, n in spec])


def stats(bias, med, p90=None):
    return {"median_rel_error": bias, "median_abs_rel_error": med, "p90_abs_rel_error": p90}


def record(step, ttft, hid=0.0, step_bias=None, ttft_bias=None, p90=0.05) -> dict:
    return {"scored": True, "decisions_equal": True,
            "step_time": stats(step if step_bias is None else step_bias, step, p90),
            "ttft": {"per_request": stats(ttft if ttft_bias is None else ttft_bias, ttft)},
            "load_hidden_fraction": {"abs_diff": hid}}


def status(checks) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def test_gpu_targets_pass_inside_and_fail_outside_the_bounds():
    assert status(comparison_checks("s", record(0.04, 0.09, 0.03))) == {
        "decisions": "PASS", "step": "PASS", "step_p90": "PASS", "ttft": "PASS",
        "hidden": "PASS"}
    assert status(comparison_checks("s", record(0.06, 0.11, 0.06, p90=0.2))) == {
        "decisions": "PASS", "step": "FAIL", "step_p90": "FAIL", "ttft": "FAIL",
        "hidden": "FAIL"}


def test_a_predictor_of_zero_or_of_twice_the_time_fails_every_error_bound():
    for err in (-1.0, 1.0):  # zero: (0 - m) / m; twice: (2m - m) / m
        rec = record(abs(err), abs(err), step_bias=err, ttft_bias=err, p90=abs(err))
        for t in (GPU, CPU):
            s = status(comparison_checks("s", rec, t))
            assert s["step"] == "FAIL" and s["ttft"] == "FAIL", (err, t)


def test_a_biased_median_fails_even_when_the_absolute_median_passes():
    rec = record(0.10, 0.10, step_bias=-0.3, ttft_bias=0.0)  # inconsistent stats: bias wins
    assert status(comparison_checks("s", rec, CPU))["step"] == "FAIL"


def test_an_unscored_comparison_fails_on_decisions_and_missing_inputs_are_na():
    assert status(comparison_checks("s", {"scored": False})) == {"decisions": "FAIL"}
    assert status(comparison_checks("s", {})) == {"step": "n/a", "ttft": "n/a"}
    rec = record(None, None)
    assert status(comparison_checks("s", rec, CPU)) == {
        "decisions": "PASS", "step": "n/a", "ttft": "n/a"}


def test_copy_bandwidth_uses_only_rows_of_at_least_one_mib():
    rows = tl(("h2d", "load", 1, 0, 0.0, 1.0, 95 * MB),  # 95 MiB/s
              ("h2d", "load", 1, 1, 1.0, 2.0, 92 * MB),
              ("h2d", "load", 1, 2, 2.0, 3.0, MB // 2),  # small: ignored
              ("d2h", "backup", 1, -1, 0.0, 1.0, 50 * MB))
    checks = {c.name: c for c in copy_checks([rows], {"h2d": 100 * MB, "d2h": 100 * MB})}
    assert checks["copy_h2d"].status == "PASS"
    assert abs(checks["copy_h2d"].value - 0.935) < 1e-9
    assert checks["copy_d2h"].status == "FAIL" and checks["copy_d2h"].value == 0.5
    assert status(copy_checks([rows], {})) == {"copy_h2d": "n/a", "copy_d2h": "n/a"}


def test_layerwise_hiding_counts_only_batches_whose_compute_outweighs_their_loads():
    hidden = tl(("h2d", "load", 1, 0, 0.0, 1.0, 0), ("compute", "prefill", 1, 0, 1.0, 3.0, 0),
                ("h2d", "load", 1, 1, 1.0, 2.0, 0), ("compute", "prefill", 1, 1, 3.0, 5.0, 0))
    c = layerwise_check(hidden)
    assert c.status == "FAIL" and c.value == 0.5  # layer 0's load runs before any compute
    # batch 2 loads more per layer than it computes: excluded, so n/a alone
    heavy = tl(("h2d", "load", 2, 0, 0.0, 3.0, 0), ("compute", "prefill", 2, 0, 3.0, 4.0, 0))
    assert layerwise_check(heavy).status == "n/a"
    assert layerwise_check(None).status == "n/a"


def test_check_all_reads_the_folders_and_main_prints_one_line_per_check(tmp_path, capsys):
    for s in ("a", "layerwise"):
        (tmp_path / s).mkdir()
        (tmp_path / s / "comparison.json").write_text(json.dumps(
            {**record(0.01, 0.0, 0.0), "profile": str(tmp_path / "none.yaml")}))
    checks = check_all(tmp_path, ["a", "layerwise"])
    assert [c.name for c in checks].count("step") == 2
    assert status(checks)["copy_h2d"] == "n/a"  # no timelines, no profile
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert sum(x.startswith("PASS ") for x in out.splitlines()) == 10
    assert "targets: 10 PASS, 0 FAIL, 3 n/a" in out
    assert main(["--cpu", str(tmp_path)]) == 0
    assert "targets: 6 PASS, 0 FAIL, 0 n/a" in capsys.readouterr().out
