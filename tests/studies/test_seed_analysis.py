"""The seed study's arithmetic and report on hand-made request frames (no simulation)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from hicache.report.frames import requests_frame
from sim.seed_study import discussion, report, text
from sim.seed_study.analysis import (
    multipliers,
    onset_round,
    relative_gap,
    rounds_table,
    run_metrics,
    session_delta,
)
from sim.seed_study.spec import MULTITURN, SESSIONS, TIERS, WAIT, session_sets


def _requests(hits: list[float], prompt: int = 1000, per_round: int = 2,
              span: float = 10.0) -> pd.DataFrame:
    """``per_round`` requests a round, round r in [r * span, (r + 1) * span), caching
    ``hits[r]`` of their prompt on the device."""
    recs = []
    for r, h in enumerate(hits):
        for c in range(per_round):
            cached = int(h * prompt)
            recs.append({"rid": len(recs), "replica": 0, "client": c, "round": r,
                         "session_id": None, "arrival": r * span, "admitted": r * span,
                         "first_token": r * span + 1 + c, "finish": (r + 1) * span - c,
                         "prompt_tokens": prompt, "output_tokens": 8,
                         "cached_tokens": cached, "device_hit": cached, "host_hit": 0,
                         "l3_hit": 0, "ttft": 1.0 + c, "itl_mean": 0.1, "rejected": None})
    return requests_frame(recs)


def test_rounds_are_summed_and_their_throughput_is_prompt_tokens_over_the_span() -> None:
    r = rounds_table(_requests([0.0, 0.5, 0.9]))
    assert list(r["hit_rate"]) == [0.0, 0.5, 0.9]
    assert list(r["input_tps"]) == [200.0, 200.0, 200.0]  # 2 x 1000 tokens in 10 s
    assert list(r["ttft_mean_s"]) == [1.5, 1.5, 1.5]


def test_cliff_and_onset_are_counted_from_one() -> None:
    m = run_metrics(_requests([0.0, 0.5, 0.9, 0.95, 0.8, 0.05, 0.0]), late=2)
    assert m["cliff_round"] == 6 and m["onset_round"] == 5  # rounds 5 and 4 from 0
    assert m["late_hit_rate"] == pytest.approx(0.025)
    assert m["rounds"] == 7
    assert onset_round(rounds_table(_requests([0.5, 0.9, 0.95]))) is None


def test_multipliers_and_session_deltas() -> None:
    fast = run_metrics(_requests([0.9, 0.9], span=5.0))
    slow = run_metrics(_requests([0.0, 0.0], span=20.0))
    assert multipliers({"L1": slow, "L1+L2+L3": fast})["L1+L2+L3"] == pytest.approx(4.0)
    d = session_delta({"ttft_mean_s": 2.0, "device_hit_rate": 0.4, "host_hit_rate": 0.1},
                      {"ttft_mean_s": 1.5, "device_hit_rate": 0.5, "host_hit_rate": 0.2})
    assert d["ttft_change_pct"] == pytest.approx(-25.0)
    assert d["device_host_lru"] == pytest.approx(0.5)
    assert relative_gap(12.0, 10.0) == pytest.approx(0.2) and relative_gap(1, None) is None


def test_session_sets_put_a_study_at_its_batch_and_size_qwens_pools() -> None:
    qwen = next(s for s in SESSIONS if s.key == "qwen3_5")
    sets = dict(s.split("=") for s in session_sets(qwen, 64))
    assert sets["scheduler.max_running_requests"] == sets["workload.max_sessions"] == "64"
    assert sets["workload.num_sessions"] == "128"
    full = int(sets["cache.device_tokens"])
    assert full * 15_360 + 3 * 64 * 24_145_920 == pytest.approx(70e9, abs=15_360)


def test_the_report_puts_each_published_figure_beside_ours(tmp_path: Path) -> None:
    hits = [0.0] + [0.9] * 30 + [0.0] * 10
    l3 = [0.0] + [0.9] * 40
    mt = {}
    for st in MULTITURN:
        reqs = {"L1": _requests(hits, span=30.0), "L1+L2": _requests(hits, span=20.0),
                "L1+L2+L3": _requests(l3, span=5.0), WAIT: _requests(l3, span=2.0)}
        metrics = {v: run_metrics(r) for v, r in reqs.items()}
        mt[st.key] = {"metrics": metrics, "x": multipliers(metrics),
                      "rounds": {v: rounds_table(r) for v, r in reqs.items()}}
    ses = pd.DataFrame([{"model": s.title, "batch": b, **session_delta(
        {"ttft_mean_s": 2.0, "device_hit_rate": 0.4, "host_hit_rate": 0.1},
        {"ttft_mean_s": 1.8, "device_hit_rate": 0.45, "host_hit_rate": 0.1})}
        for s in SESSIONS for b in s.batches])
    res = {"multiturn": mt, "session": ses, "sweeps": {}}
    res["readings"] = text.readings(res)
    path = report.render(res, tmp_path, text.intro({}), discussion.discussion(res))
    body = path.read_text()
    assert "| effective input throughput, L1+L2+L3 / L1 [x] | 15.5 | 6.0 | 61% **>20%** |" \
        in body
    assert "| DeepSeek-V4-Pro TP8 | 128 | -11.0% | -10.0% | 9% |" in body
    # the seed's flags, then prefetches that run to completion
    assert ("| L1+L2+L3 hit rate, last 5 rounds | 98% | 90% | 8% | 90% | 8% | 3.3 prefetch "
            "policy, 3.4 prefetch share of L2 |") in body
    assert "| effective input throughput, L1+L2+L3 / L1 [x] | 15.5 | 6.0 | 61% **>20%** | " \
        "15.0 | 3% |" in body
    for name in ("multiturn_dsv4_flash.png", "multiturn_inkling_small.png",
                 "session_aware.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert set(TIERS) <= set(mt["dsv4_flash"]["metrics"])


def _pro_swa(component_hit: float, component_ttft: float) -> pd.DataFrame:
    """A hand-made section-3.16 sweep: two SWA pools, LRU and both coverage rules."""
    rows = []
    for pool in (88000, 880000):
        for v, hit, ttft in (("lru", 0.40, 10.0), ("session", 0.41, 9.9),
                             ("session_component", component_hit, component_ttft)):
            rows.append({"run.swa_tokens": pool, "variant": v, "device_hit_rate": hit,
                         "hit_rate": 0.5, "ttft_mean_s": ttft})
    return pd.DataFrame(rows)


def test_the_window_sweep_names_both_rules_and_says_whether_the_gain_comes_out() -> None:
    from sim.seed_study.gaps import coverage_points, sglang_policy
    assert coverage_points(_pro_swa(0.5, 8.8))[:2] == [
        "SWA pool 88K tokens, path: device hit 40% -> 41%, TTFT -1.0%",
        "SWA pool 88K tokens, component: device hit 40% -> 50%, TTFT -12.0%"]
    assert "reproduce the published gain, a measured cause" in sglang_policy(
        {"pro_swa": _pro_swa(0.5, 8.8)})  # +10 points, -12%: the published +9, -11%
    assert "do not reproduce the published gain" in sglang_policy(
        {"pro_swa": _pro_swa(0.41, 9.9)})


def test_the_hit_counting_paragraph_reads_both_rules_off_the_sweeps() -> None:
    from sim.seed_study.gaps import hit_counting
    tps = {("every_insert", "L1"): 100.0, ("every_insert", "L1+L2"): 550.0,
           ("every_insert", "L1+L2+L3"): 290.0, ("every_insert", WAIT): 1300.0,
           ("once_per_request", "L1"): 100.0, ("once_per_request", "L1+L2"): 180.0,
           ("once_per_request", "L1+L2+L3"): 180.0, ("once_per_request", WAIT): 181.0}
    dsv4 = pd.DataFrame([{"cache.hit_count": r, "variant": v, "l3_hit_rate": 0.0,
                          "effective_input_throughput_tps": x} for (r, v), x in tps.items()])
    ink = pd.DataFrame([{"cache.hit_count": r, "workload.output_length": n, "variant": v,
                         "hit_rate": 0.95 if (r, n) == ("every_insert", 256) else 0.36,
                         "l3_hit_rate": 0.74 if (r, n) == ("every_insert", 256) else 0.0}
                        for r in ("every_insert", "once_per_request") for n in (64, 256)
                        for v in ("L1+L2", WAIT)])
    text = hit_counting(dsv4, ink)
    assert "every_insert: L1+L2 5.5x L1, L1+L2+L3 2.9x (L3 0%), wait_complete 13.0x" in text
    assert "once_per_request: L1+L2 1.8x L1, L1+L2+L3 1.8x (L3 0%), wait_complete 1.8x" in text
    assert "every_insert, 256-token answers: 95%, L3 74%" in text
    assert "once_per_request, 256-token answers: 36%, L3 0%" in text
    assert ("L2 step (1.5x): once_per_request; within a factor of 2 of the published L3 "
            "multiplier (15.5x): every_insert. No one rule" in text)
    assert hit_counting(None, ink) == ""
