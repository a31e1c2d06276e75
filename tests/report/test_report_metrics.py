"""Metrics on hand-built timelines and request sets whose answers are known in closed form."""

import numpy as np
import pandas as pd
import pytest

from hicache.report.frames import requests_frame, timeline_frame
from hicache.report.metrics import cliff_round, hit_rate_by_round, summarize, timeline_metrics


def tl(*rows) -> pd.DataFrame:
    """rows: (lane, op, start, end[, bytes])"""
    full = [(r[0], r[1], -1, -1, -1, r[2], r[3], r[4] if len(r) > 4 else 0) for r in rows]
    return timeline_frame(full)


def req(rid, prompt, cached=0, rnd=0, **kw):
    return dict(rid=rid, prompt_tokens=prompt, output_tokens=kw.pop("out", 2),
                device_hit=cached, round=rnd, **kw)  # fmt: skip


def test_gpu_busy_counts_overlapping_compute_rows_once():
    m = timeline_metrics(tl(("compute", "prefill", 0, 2), ("compute", "decode", 1, 3),
                            ("compute", "decode", 5, 6), ("h2d", "load", 3, 5)))  # fmt: skip
    # union [0,3] + [5,6] = 4 s over the compute span [0,6]; the H2D row is not compute
    assert m["compute_span_s"] == 6
    assert m["gpu_busy_fraction"] == pytest.approx(4 / 6)
    assert m["gpu_bubble_fraction"] == pytest.approx(2 / 6)


def test_load_half_overlapping_compute_is_half_hidden():
    m = timeline_metrics(tl(("compute", "prefill", 0.0, 1.0), ("h2d", "load", 0.5, 1.5),
                            ("h2d", "prefetch", 1.5, 9.0),  # not a load: ignored
                            ("d2h", "load", 5.0, 6.0)))  # not on lane h2d: ignored  # fmt: skip
    assert m["load_time_s"] == pytest.approx(1.0)
    assert m["load_hidden_fraction"] == pytest.approx(0.5)


def test_load_over_overlapping_compute_rows_is_not_double_counted():
    m = timeline_metrics(tl(("compute", "a", 0, 2), ("compute", "b", 1, 3), ("h2d", "load", 1, 4)))
    assert m["load_hidden_fraction"] == pytest.approx(2 / 3)


def test_load_hidden_fraction_matches_brute_force_on_random_rows():
    rng = np.random.default_rng(7)
    rows = []
    for lane, op, n in (("compute", "decode", 400), ("h2d", "load", 300)):
        s = rng.uniform(0, 100, n)
        rows += [(lane, op, a, a + d) for a, d in zip(s, rng.exponential(0.5, n), strict=True)]
    m = timeline_metrics(tl(*rows))
    comp = sorted((a, b) for lane, _, a, b in rows if lane == "compute")
    merged = [list(comp[0])]
    for a, b in comp[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    loads = [(a, b) for lane, _, a, b in rows if lane == "h2d"]
    hidden = sum(max(0.0, min(b, d) - max(a, c)) for a, b in loads for c, d in merged)
    assert m["load_hidden_fraction"] == pytest.approx(hidden / sum(b - a for a, b in loads))


def test_copy_bandwidth_uses_bytes_over_union_of_stream_busy_time():
    m = timeline_metrics(tl(("h2d", "load", 0.0, 1.0, 10**9), ("h2d", "load", 0.5, 1.5, 10**9),
                            ("ce:h2d", "load", 0.0, 1.5, 2 * 10**9),  # same bytes, not counted
                            ("d2h", "backup", 2.0, 2.5, 10**9)))  # fmt: skip
    assert m["h2d_bytes"] == 2 * 10**9 and m["h2d_busy_s"] == pytest.approx(1.5)
    assert m["h2d_gbps"] == pytest.approx(2 / 1.5)
    assert m["d2h_gbps"] == pytest.approx(2.0)


def test_hit_rate_is_summed_per_round_not_mean_of_ratios():
    df = requests_frame([req(1, 100, 0, rnd=0), req(2, 10, 10, rnd=0),
                         req(3, 200, 150, rnd=1), dict(req(4, 200, 0, rnd=1), host_hit=50,
                                                       l3_hit=100)])  # fmt: skip
    by_round = hit_rate_by_round(df)
    assert by_round["round"].tolist() == [0, 1]
    r0 = by_round.iloc[0]
    assert r0["prompt_tokens"] == 110 and r0["cached_tokens"] == 10
    assert r0["hit_rate"] == pytest.approx(10 / 110)  # the mean of ratios would be 0.5
    r1 = by_round.iloc[1]
    assert (r1["device_hit"], r1["host_hit"], r1["l3_hit"]) == (150, 50, 100)
    assert r1["hit_rate"] == pytest.approx(300 / 400)
    assert r1["l3_hit_rate"] == pytest.approx(100 / 400)
    s = summarize(df, tl())
    assert s["hit_rate"] == pytest.approx(310 / 510)
    assert s["device_hit_rate"] + s["host_hit_rate"] + s["l3_hit_rate"] == pytest.approx(310 / 510)


def test_ttft_percentiles_linear_interpolation():
    df = requests_frame([req(i, 10, arrival=0.0, first_token=float(i)) for i in range(1, 101)])
    s = summarize(df, tl())
    assert s["ttft_mean_s"] == pytest.approx(50.5)
    assert s["ttft_p50_s"] == pytest.approx(50.5)
    assert s["ttft_p90_s"] == pytest.approx(90.1)
    assert s["ttft_p99_s"] == pytest.approx(99.01)


def test_itl_mean_is_gap_weighted_and_percentiles_approximate_per_gap():
    df = requests_frame([req(1, 10, out=1001, itl_mean=0.01), req(2, 10, out=2, itl_mean=1.0),
                         req(3, 10, out=1)])  # one token: no gaps, itl_mean NaN  # fmt: skip
    s = summarize(df, tl())
    assert s["itl_mean_s"] == pytest.approx((1000 * 0.01 + 1.0) / 1001)
    assert s["itl_p50_s"] == pytest.approx(0.01) and s["itl_p99_s"] == pytest.approx(0.01)


def test_throughputs_count_finished_requests_over_duration():
    df = requests_frame([req(1, 100, 40, out=10, arrival=0.0, finish=1.0),
                         req(2, 300, 0, out=30, arrival=0.5, finish=2.0),
                         req(3, 50, 0, out=5, arrival=1.0)])  # unfinished  # fmt: skip
    s = summarize(df, tl())
    assert s["duration_s"] == 2.0 and s["n_finished"] == 2
    assert s["request_throughput_rps"] == pytest.approx(1.0)
    assert s["output_throughput_tps"] == pytest.approx(20.0)
    assert s["effective_input_throughput_tps"] == pytest.approx(200.0)  # cached included
    assert summarize(df, tl(), duration=4.0)["request_throughput_rps"] == pytest.approx(0.5)


def test_empty_inputs_give_zero_counts_and_none_ratios():
    s = summarize(requests_frame([]), timeline_frame([]))
    assert s["n_requests"] == 0 and s["prompt_tokens"] == 0 and s["h2d_bytes"] == 0
    for k in ("ttft_p50_s", "itl_p99_s", "hit_rate", "request_throughput_rps",
              "gpu_busy_fraction", "h2d_gbps", "load_hidden_fraction"):  # fmt: skip
        assert s[k] is None, k
    assert summarize(pd.DataFrame(), None) == s
    assert len(hit_rate_by_round(requests_frame([]))) == 0
    only_compute = summarize(requests_frame([]), tl(("compute", "decode", 0, 1)))
    assert only_compute["gpu_busy_fraction"] == 1.0 and only_compute["load_hidden_fraction"] is None
    zero_prompt = hit_rate_by_round(requests_frame([req(1, 0)]))
    assert np.isnan(zero_prompt["hit_rate"].iloc[0])


def test_replicas_are_unioned_separately_then_pooled():
    df = tl(("compute", "a", 0, 2), ("h2d", "load", 1, 3), ("compute", "a", 0, 1),
            ("h2d", "load", 0, 2))  # fmt: skip
    df["replica"] = [0, 0, 1, 1]
    m = timeline_metrics(df)
    # replica 0: busy 2 of span 2, load hides 1 of 2; replica 1: busy 1 of 1, hides 1 of 2
    assert m["compute_span_s"] == 3 and m["gpu_busy_fraction"] == 1.0
    assert m["load_hidden_fraction"] == pytest.approx(0.5)
    pooled = timeline_metrics(df.drop(columns="replica"))  # one GPU: loads overlap [0,2]
    assert pooled["load_hidden_fraction"] == pytest.approx(3 / 4)


def test_gpu_busy_in_a_summary_is_over_the_run_not_the_compute_span() -> None:
    """A GPU that computes 2 s back to back inside a 10 s run is 20% busy, not 100%."""
    from hicache.report.frames import requests_frame as _req
    from hicache.report.frames import timeline_frame as _tl
    from hicache.report.metrics import summarize as _sum

    req = _req([{"rid": 0, "arrival": 0.0, "finish": 1.0, "first_token": 0.5,
                 "prompt_tokens": 4, "output_tokens": 1},
                {"rid": 1, "arrival": 9.0, "finish": 10.0, "first_token": 9.5,
                 "prompt_tokens": 4, "output_tokens": 1}])
    tl = _tl([("compute", "prefill", 1, -1, -1, 0.0, 1.0, 0),
              ("compute", "prefill", 2, -1, -1, 9.0, 10.0, 0)])
    s = _sum(req, tl)
    assert s["gpu_busy_fraction"] == pytest.approx(0.2)
    assert s["gpu_bubble_fraction"] == pytest.approx(0.8)
    two = tl.assign(replica=[0, 1])  # two GPUs, each busy 1 s of the 10 s run
    assert _sum(req, two)["gpu_busy_fraction"] == pytest.approx(0.1)


def test_the_cliff_is_where_the_hit_rate_stays_low_for_good() -> None:
    def frame(rates):
        return pd.DataFrame({"round": range(len(rates)), "hit_rate": rates})

    assert cliff_round(frame([0.0, 0.5, 0.9, 0.05, 0.3, 0.02, 0.0])) == 5  # dips do not count
    assert cliff_round(frame([0.0, 0.5, 0.9, 0.95])) is None  # never collapses
    assert cliff_round(frame([0.0, 0.01, 0.0])) is None  # never held anything
    assert cliff_round(frame([0.0, 0.8, float("nan")])) == 2  # a round without prompts: 0
    assert cliff_round(frame([])) is None
