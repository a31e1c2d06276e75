"""``hicache-lab sweep``: a scenario over a grid, and the planner's answer to a target."""

from __future__ import annotations

import copy
import io

import pandas as pd
import pytest
import yaml

from hicache.cli import main
from sim.sweep import (
    METRICS,
    SweepError,
    Target,
    answer,
    expand_grid,
    parse_grid,
    parse_target,
    run_sweep,
)

# scenarios/quick.yaml in miniature: L1 holds 16 pages, so 4 chat clients overflow it.
TINY = {
    "name": "tiny", "seed": 0, "model": "llama-3-8b", "hardware": "h100-sxm",
    "cache": {"page_size": 64, "device_tokens": 1024, "hicache_ratio": 2,
              "hicache_write_policy": "write_through"},
    "scheduler": {"max_running_requests": 8, "chunked_prefill_size": 4096},
    "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 3, "request_length": 256,
                 "output_length": 8, "request_rate": 100, "max_parallel": 4},
    "variants": [{"name": "L1", "set": {"cache.enable_hierarchical_cache": False}},
                 {"name": "L1+L2", "set": {"cache.enable_hierarchical_cache": True}}],
}  # fmt: skip


def tiny(**cache) -> dict:
    d = copy.deepcopy(TINY)
    d["cache"].update(cache)
    return d


# -- grid parsing and order -----------------------------------------------------------------
def test_grid_values_are_parsed_as_yaml_and_keys_keep_their_order() -> None:
    grid = parse_grid(["workload.num_clients=8,16", "cache.hicache_ratio=1.5,2",
                       "cache.hicache_storage_backend=null,mooncake", "scheduler.overlap=true"])
    assert list(grid) == ["workload.num_clients", "cache.hicache_ratio",
                          "cache.hicache_storage_backend", "scheduler.overlap"]
    assert grid["workload.num_clients"] == [8, 16]
    assert grid["cache.hicache_ratio"] == [1.5, 2]
    assert grid["cache.hicache_storage_backend"] == [None, "mooncake"]
    assert grid["scheduler.overlap"] == [True]


@pytest.mark.parametrize("items, message", [
    (["cache.hicache_ratio"], "cache.hicache_ratio"),
    (["cache.hicache_ratio=1.5,,2"], "--grid cache.hicache_ratio: empty value"),
    (["cache.hicache_ratio=2,2"], "--grid cache.hicache_ratio: repeated value"),
    (["a.b=1", "a.b=2"], "--grid a.b: given twice"),
    ([], "at least one"),
])  # fmt: skip
def test_a_malformed_grid_is_rejected_naming_the_key(items: list[str], message: str) -> None:
    with pytest.raises(SweepError, match=message.replace("+", r"\+")):
        parse_grid(items)


def test_the_first_grid_key_is_the_outermost_loop() -> None:
    points = expand_grid({"a": [1, 2], "b": ["x", "y", "z"]})
    assert [(p["a"], p["b"]) for p in points] == [
        (1, "x"), (1, "y"), (1, "z"), (2, "x"), (2, "y"), (2, "z")]


def test_rows_follow_the_grid_then_the_scenario_variants_and_repeat_exactly() -> None:
    grid = {"workload.num_clients": [3, 2], "cache.hicache_ratio": [4, 1.5]}
    df = run_sweep(TINY, grid, log=None)
    got = list(zip(df["workload.num_clients"], df["cache.hicache_ratio"], df["variant"],
                   strict=True))
    assert got == [(3, 4, "L1"), (3, 4, "L1+L2"), (3, 1.5, "L1"), (3, 1.5, "L1+L2"),
                   (2, 4, "L1"), (2, 4, "L1+L2"), (2, 1.5, "L1"), (2, 1.5, "L1+L2")]
    pd.testing.assert_frame_equal(df, run_sweep(TINY, grid, log=None))


def test_only_the_chosen_variants_run_and_a_progress_line_is_written_per_run() -> None:
    log = io.StringIO()
    df = run_sweep(TINY, {"workload.num_clients": [2, 3]}, variants=["L1+L2"], log=log)
    assert list(df["variant"]) == ["L1+L2", "L1+L2"]
    lines = log.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["[1/2]", "[2/2]"]
    assert "workload.num_clients=3 L1+L2: ttft_p90_s=" in lines[1]


def test_each_point_really_runs_with_its_values() -> None:
    df = run_sweep(TINY, {"workload.num_clients": [2, 4]}, variants=["L1"], log=None)
    assert list(df["n_requests"]) == [2 * 3, 4 * 3]  # clients x rounds


# -- errors name the key, before anything is simulated ------------------------------------
@pytest.mark.parametrize("grid, named", [
    ({"cache.hicache_ratioo": [2]}, "cache.hicache_ratioo"),
    ({"workload.num_client": [2]}, "workload.num_client"),
    ({"scheduler.max_running": [2]}, "scheduler.max_running"),
    ({"cach.page_size": [2]}, "cach"),
    ({"workload.num_clients": [2], "cache.hicache_ratio": [1.5, 0.5]}, "hicache_ratio"),
])  # fmt: skip
def test_a_bad_key_or_value_fails_naming_it_and_runs_nothing(grid: dict, named: str) -> None:
    log = io.StringIO()
    with pytest.raises(SweepError, match=named) as e:
        run_sweep(TINY, grid, log=log)
    assert str(e.value).startswith("--grid")
    assert log.getvalue() == ""


def test_a_grid_key_that_a_variant_overrides_is_an_error_naming_both() -> None:
    with pytest.raises(SweepError, match=r"cache.enable_hierarchical_cache: variant 'L1'"):
        run_sweep(TINY, {"cache.enable_hierarchical_cache": [True]}, log=None)


def test_an_unknown_variant_or_target_metric_is_rejected() -> None:
    with pytest.raises(SweepError, match="--variant"):
        run_sweep(TINY, {"cache.hicache_ratio": [2]}, variants=["L9"], log=None)
    with pytest.raises(SweepError, match="'ttft_p95_s'"):
        parse_target("ttft_p95_s<=2")
    assert parse_target(" ttft_p90_s <= 2.5 ") == Target("ttft_p90_s", "<=", 2.5)


# -- the target answer ----------------------------------------------------------------------
def test_answer_is_the_smallest_value_meeting_the_target_per_first_key_and_variant() -> None:
    grid = {"n": [8, 16], "ratio": [4, 2, 3]}  # answer by value, not by grid order
    rows = [(8, 4, True), (8, 2, True), (8, 3, True),
            (16, 4, True), (16, 2, False), (16, 3, True)]
    df = pd.DataFrame([{"n": n, "ratio": r, "variant": "v", "meets_target": m}
                       for n, r, m in rows])
    df = pd.concat([df, df.assign(variant="w", meets_target=[False, False, False,
                                                             False, True, False])])
    ans = answer(df, grid).set_index(["n", "variant"])
    assert ans.loc[(8, "v"), "smallest"] == 2 and ans.loc[(16, "v"), "smallest"] == 3
    assert ans.loc[(8, "w"), "smallest"] is None
    assert ans.loc[(16, "w"), "smallest"] == 2 and not ans.loc[(16, "w"), "monotone"]
    assert ans.loc[(16, "v"), "monotone"]


def test_more_l2_reaches_the_hit_rate_of_an_unbounded_cache_at_a_known_ratio() -> None:
    """Multiturn history only grows, so hit rate is monotone in L2 size; a cache with a
    huge L1 bounds it. Two clients fit L1+L2 at any ratio, four need more L2."""
    ideal = run_sweep(tiny(device_tokens=1_000_000), {"workload.num_clients": [2, 4]},
                      variants=["L1"], log=None)["hit_rate"].tolist()
    assert ideal[0] == pytest.approx(ideal[1])
    target = parse_target(f"hit_rate>={ideal[1] - 1e-9}")
    grid = {"workload.num_clients": [2, 4], "cache.hicache_ratio": [1.5, 2, 3, 4, 8]}
    df = run_sweep(TINY, grid, variants=["L1+L2"], target=target, log=None)
    four = df[df["workload.num_clients"] == 4]
    assert four["hit_rate"].is_monotonic_increasing
    assert not four["meets_target"].iloc[0] and four["meets_target"].iloc[-1]
    ans = answer(df, grid).set_index("workload.num_clients")["smallest"]
    assert ans[2] == 1.5
    first_met = four[four["meets_target"]]["cache.hicache_ratio"].iloc[0]
    assert 1.5 < ans[4] == first_met < 8


# -- the command ------------------------------------------------------------------------------
def test_the_command_writes_tables_plots_and_prints_the_answer(tmp_path, capsys) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    rc = main(["sweep", str(scenario), "--grid", "workload.num_clients=2,4",
               "--grid", "cache.hicache_ratio=1.5,8", "--target", "ttft_p90_s<=1000",
               "--out", str(out), "--executor", "serial"])
    assert rc == 0
    df = pd.read_parquet(out / "sweep.parquet")
    assert list(df.columns[:5]) == ["workload.num_clients", "cache.hicache_ratio", "variant",
                                    "seed", "error"]
    assert set(METRICS) <= set(df.columns) and df.columns[-1] == "meets_target"
    assert "wall_s" not in df.columns  # tables must not differ between runs
    assert len(df) == 2 * 2 * 2 and df["meets_target"].all() and df["error"].isna().all()
    assert len(pd.read_csv(out / "sweep.csv")) == len(df)
    table = (out / "sweep.txt").read_text().splitlines()
    assert len(table) == 2 + len(df) and table[0].split()[:3] == list(df.columns[:3])
    l1_rows = [line for line in table[2:] if " L1 " in f"{line} "]
    assert l1_rows and all(line.split()[1] == "n/a" for line in l1_rows)  # L1 has no L2
    assert {p.name for p in out.glob("*.png")} == {"heatmap_L1.png", "heatmap_L1_L2.png"}
    assert (out / ".complete").exists() and len(list((out / "points").iterdir())) == len(df)
    captured = capsys.readouterr()
    assert ("workload.num_clients=4 [L1+L2]: smallest cache.hicache_ratio=1.5 "
            "(L2 host memory 0.2 GiB per GPU)") in captured.out
    assert "(at the grid's lower edge" in captured.out
    assert "workload.num_clients=4 [L1]: cache.hicache_ratio does not apply" in captured.out
    assert captured.err.count("\n") == len(df)


def test_the_command_with_one_key_plots_metric_lines_and_fails_cleanly_on_a_bad_key(
        tmp_path, capsys) -> None:  # fmt: skip
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    rc = main(["sweep", str(scenario), "--grid", "workload.num_clients=2,3", "--variant", "L1",
               "--out", str(tmp_path / "one"), "--executor", "serial"])
    assert rc == 0
    assert {p.name for p in (tmp_path / "one").glob("*.png")} == {
        "ttft_p90_s.png", "hit_rate.png", "effective_input_throughput_tps.png"}
    assert "meets_target" not in pd.read_csv(tmp_path / "one" / "sweep.csv").columns
    rc = main(["sweep", str(scenario), "--grid", "cache.pagesize=32", "--out",
               str(tmp_path / "bad")])
    assert rc == 2 and "cache.pagesize" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_an_existing_sweep_folder_is_refused_resumed_or_replaced(tmp_path, capsys) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    args = ["sweep", str(scenario), "--grid", "workload.num_clients=2,3", "--variant", "L1",
            "--out", str(out), "--executor", "serial"]
    assert main(args) == 0
    first = pd.read_parquet(out / "sweep.parquet")
    capsys.readouterr()
    assert main(args) == 2 and "--resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert capsys.readouterr().err == ""  # every point was done: nothing ran again
    pd.testing.assert_frame_equal(pd.read_parquet(out / "sweep.parquet"), first)
    other = [*args[:3], "workload.num_clients=2,4", *args[4:], "--resume"]
    assert main(other) == 2 and "different sweep" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    assert capsys.readouterr().err.count("\n") == 2  # ran again from scratch


def test_an_interrupted_sweep_exits_130_keeps_its_points_and_resumes(tmp_path, capsys,
                                                                     monkeypatch) -> None:
    import sim.sweep_exec

    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    args = ["sweep", str(scenario), "--grid", "workload.num_clients=2,3", "--variant", "L1",
            "--out", str(out), "--executor", "serial", "--no-plots"]
    real, calls = sim.sweep_exec.run_task, []

    def interrupted(task):  # noqa: ANN001, ANN202 - the second point is cut by Ctrl-C
        calls.append(task)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(sim.sweep_exec, "run_task", interrupted)
    assert main(args) == 130
    assert "--resume continues the sweep" in capsys.readouterr().err
    assert not (out / ".complete").exists() and not (out / "sweep.parquet").exists()
    assert len(list((out / "points").iterdir())) == 1
    monkeypatch.setattr(sim.sweep_exec, "run_task", real)
    assert main([*args, "--resume"]) == 0
    assert (out / ".complete").exists() and len(pd.read_parquet(out / "sweep.parquet")) == 2
