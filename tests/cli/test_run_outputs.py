"""``hicache-lab run`` outputs: one folder per variant, complete or absent, never mixed,
the resolved scenario beside the results, traces whose slices never overlap on a thread."""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
import yaml

from hicache.cli import main
from hicache.report.perfetto import chrome_trace
from hicache.report.plots import _gantt_rows
from hicache.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
# quick.yaml shrunk to a fraction of a second, with two variants whose names clean alike
TINY = load_scenario(ROOT / "scenarios/quick.yaml").with_overrides([
    "name=tiny", "cache.device_tokens=2048", "cache.hicache_ratio=2",
    "scheduler.max_running_requests=8", "workload.num_clients=4", "workload.num_rounds=3",
    "workload.request_length=256", "workload.output_length=8", "workload.request_rate=100",
    "workload.max_parallel=4",
    "variants=[{name: L1, set: {cache.enable_hierarchical_cache: false}},"
    " {name: L1 L2, set: {cache.enable_hierarchical_cache: true}},"
    " {name: L1_L2, set: {cache.enable_hierarchical_cache: true, cache.hicache_ratio: 3}}]"]
).to_mapping()


def scenario(tmp_path: Path, d: dict | None = None) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(d or TINY, sort_keys=False))
    return str(path)


def run(*args: str) -> int:
    return main(["run", *args, "--no-progress"])


def test_every_variant_gets_its_own_folder_with_its_resolved_scenario(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert run(scenario(tmp_path), "--out", str(out), "--no-plots") == 0
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["variants"] == {"L1": "L1", "L1 L2": "L1_L2", "L1_L2": "L1_L2-2"}
    assert sorted(p.name for p in out.iterdir()) == [
        "L1", "L1_L2", "L1_L2-2", "comparison.csv", "comparison.txt", "run.json",
        "scenario.yaml"]
    assert yaml.safe_load((out / "scenario.yaml").read_text())["variants"] == TINY["variants"]
    body = yaml.safe_load((out / "L1_L2-2" / "scenario.yaml").read_text())
    assert body["cache"]["hicache_ratio"] == 3 and "variants" not in body
    tl = pd.read_parquet(out / "L1" / "timeline.parquet")
    assert "replica" in tl.columns and (tl["replica"] == 0).all()
    summary = json.loads((out / "L1_L2-2" / "summary.json").read_text())
    assert summary["variant"] == "L1_L2" and summary["l2_tokens"] == 3 * 2048
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100


def test_a_single_variant_still_gets_a_folder_and_reruns_never_mix(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    path = scenario(tmp_path)
    assert run(path, "--out", str(out), "--variant", "L1", "--no-plots") == 0
    assert (out / "L1" / "summary.json").exists()
    capsys.readouterr()
    assert run(path, "--out", str(out), "--variant", "L1 L2") == 2
    err = capsys.readouterr().err
    assert "already holds a previous run; pass --overwrite" in err
    assert run(path, "--out", str(out), "--variant", "L1 L2", "--overwrite", "--no-plots") == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["L1_L2"]


def test_an_interrupted_run_exits_130_and_leaves_nothing(tmp_path, capsys, monkeypatch) -> None:
    import sim.driver

    calls = []

    def interrupted(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:  # the first variant's files are written by then
            raise KeyboardInterrupt
        return real(*a, **kw)

    real = sim.driver.simulate
    monkeypatch.setattr(sim.driver, "simulate", interrupted)
    assert run(scenario(tmp_path), "--out", str(tmp_path / "out")) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_an_unwritable_output_fails_before_simulating(tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    assert run(scenario(tmp_path), "--out", str(tmp_path / "file" / "out")) == 2
    cap = capsys.readouterr()
    assert "cannot write there" in cap.err and "simulating" not in cap.out


def test_trace_and_plots_can_be_skipped_or_windowed(tmp_path) -> None:
    path = scenario(tmp_path)
    assert run(path, "--out", str(tmp_path / "a"), "--variant", "L1", "--no-trace",
               "--no-plots") == 0
    assert not list((tmp_path / "a").rglob("*.png")) and not list((tmp_path / "a").rglob(
        "trace.json"))
    assert run(path, "--out", str(tmp_path / "b"), "--variant", "L1",
               "--trace-window", "0.01:0.02", "--no-plots") == 0
    events = json.loads((tmp_path / "b" / "L1" / "trace.json").read_text())["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    tl = pd.read_parquet(tmp_path / "b" / "L1" / "timeline.parquet")
    assert 0 < len(xs) < len(tl)
    assert all(e["ts"] <= 0.02e6 and e["ts"] + e["dur"] >= 0.01e6 for e in xs)


def test_a_trace_workload_plots_hit_rate_over_time_and_has_no_rounds_file(tmp_path) -> None:
    d = copy.deepcopy(TINY)
    d["workload"] = {"kind": "long_context", "count": 6, "prompt_length": 1024,
                     "output_length": 4, "request_rate": 20, "num_documents": 2,
                     "document_length": 768}
    out = tmp_path / "out"
    assert run(scenario(tmp_path, d), "--out", str(out), "--variant", "L1") == 0
    names = {p.name for p in (out / "L1").iterdir()}
    assert "hit_rate_over_time.png" in names and "hit_rate_by_round.png" not in names
    assert "rounds.csv" not in names


def test_a_baseline_names_its_scenario_and_refuses_another(tmp_path, capsys) -> None:
    path = scenario(tmp_path)
    base = tmp_path / "base.json"
    assert run(path, "--out", str(tmp_path / "a"), "--variant", "L1", "--no-plots",
               "--write-baseline", str(base)) == 0
    assert json.loads(base.read_text())["scenario"] == "tiny"
    d = copy.deepcopy(TINY)
    d["name"] = "other"
    capsys.readouterr()
    rc = run(scenario(tmp_path, d), "--out", str(tmp_path / "b"), "--variant", "L1",
             "--baseline", str(base))
    assert rc == 2 and "a baseline of scenario 'tiny', not of 'other'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # refused before simulating


def _overlaps(trace: dict) -> int:
    """Slices on one thread that overlap without nesting (Chrome's rule), in whole ns."""
    by_thread = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            by_thread[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1000)))
    bad = 0
    for spans in by_thread.values():
        stack: list[int] = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and e > stack[-1]:
                bad += 1
            stack.append(e)
    return bad


def test_no_thread_of_the_quick_trace_has_overlapping_slices(tmp_path) -> None:
    out = tmp_path / "q"
    assert run(str(ROOT / "scenarios/quick.yaml"), "--out", str(out), "--no-plots") == 0
    for variant in ("L1", "L1+L2", "L1+L2+L3"):
        trace = json.loads((out / variant / "trace.json").read_text())
        assert _overlaps(trace) == 0, variant
    tl = pd.read_parquet(out / "L1+L2+L3" / "timeline.parquet")
    l3 = tl[tl["lane"] == "l3"].sort_values("start")
    assert (l3["start"].to_numpy()[1:] < l3["end"].cummax().to_numpy()[:-1]).any(), \
        "the L3 lane should have concurrent transfers for this test to mean anything"


def test_no_thread_of_a_multi_replica_l3_trace_overlaps_and_gantt_rows_name_replicas(
        tmp_path) -> None:  # fmt: skip
    d = copy.deepcopy(TINY)
    d.update(replicas=2, router="cache_aware", variants=[])
    d["cache"].update(enable_hierarchical_cache=True, hicache_storage_backend="mooncake")
    d["workload"].update(num_clients=8, max_parallel=8)
    out = tmp_path / "out"
    assert run(scenario(tmp_path, d), "--out", str(out), "--no-plots") == 0
    tl = pd.read_parquet(out / "tiny" / "timeline.parquet")
    assert set(tl["replica"]) == {0, 1} and (tl["lane"] == "l3").any()
    trace = chrome_trace(tl)
    assert _overlaps(trace) == 0
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"replica0", "replica1"}
    labels = list(_gantt_rows(tl))
    assert labels[0].startswith("replica0 · ") and any(x.startswith("replica1 · ")
                                                       for x in labels)


def test_the_overlap_check_itself_finds_overlaps() -> None:
    trace = {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 2.0},
                             {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
                             {"ph": "X", "pid": 1, "tid": 2, "ts": 0.0, "dur": 4.0},
                             {"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 1.0}]}
    assert _overlaps(trace) == 1  # tid 2 nests, which Chrome allows


@pytest.mark.parametrize("size", ["4e6", "4M", "4000Ki"])
def test_replay_names_the_capacity_it_used(tmp_path, capsys, size: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival": 0, "tokens": [1, 2, 3, 4], "output_len": 1}\n')
    assert main(["replay", "--trace", str(trace), "--format", "tokens", "--page-size", "2",
                 "--capacity-tokens", size]) == 0
    out = capsys.readouterr().out
    expected = 4_000_000 if size != "4000Ki" else 4000 * 1024
    assert f"L1 capacity {expected:,} tokens" in out


def test_a_real_sigint_exits_130_and_leaves_no_output(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    # ten times the scenario's clients: its three variants then take minutes, not the
    # seconds a loaded machine may let pass between the first line and the kill (at 64
    # clients the run once finished first and exited 0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache.cli", "run", str(ROOT / "scenarios/multiturn_tiers.yaml"),
         "--out", str(out), "--no-progress", "--set", "workload.num_clients=640"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=tmp_path,
        # a shell runs background jobs with SIGINT ignored, and Python keeps an ignored
        # SIGINT ignored: give the child the default, as a terminal's Ctrl-C would find it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()  # "[L1] simulating ..." (the run has begun)
        assert "simulating" in line
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a run that ignored the interrupt must not outlive the test
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # neither the run folder nor a partial one
