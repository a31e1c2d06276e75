"""Dotted overrides into a key whose value names a mapping (``--set
hardware.l3.mooncake.nic_bytes_per_s=7e8`` on ``hardware: h100-sxm``, ``model.KEY`` on a
model preset, ``router.KEY`` on a policy name): the name becomes the mapping the loader
would read, in the order the items are given, relative to the scenario's folder."""

from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from hicache.modelspec import load_model_spec
from hicache.scenario import ScenarioError, load_resolved, load_scenario
from hicache.scenario.overrides import apply_overrides
from hicache.schema.yamlio import read_yaml
from sim.hardware.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
HW = ROOT / "scenarios" / "hardware"
NIC = "hardware.l3.mooncake.nic_bytes_per_s=7e8"


def profile(name: str, **mooncake: float) -> dict:
    """The shipped profile ``name`` with ``mooncake`` keys changed (built by hand)."""
    hw = copy.deepcopy(read_yaml(HW / f"{name}.yaml").data)
    hw["l3"]["mooncake"].update(mooncake)
    return hw


def test_a_dotted_key_changes_one_value_of_the_named_profile_in_every_variant() -> None:
    sc = load_scenario("quick", [NIC])
    want = profile("h100-sxm", nic_bytes_per_s=7e8)
    assert sc.hardware == want
    assert [v.hardware for _, v in sc.expand()] == [want] * 3
    assert load_profile(sc.hardware).mooncake.nic_bytes_per_s == 7e8
    assert load_profile(sc.hardware).pcie == load_profile("h100-sxm").pcie
    from hicache.scenario.command import describe

    assert " on h100-sxm (inline) x1, " in describe("L1", sc)


def test_items_apply_in_order() -> None:
    on_h200 = load_scenario("quick", ["hardware=h200-sxm", NIC])
    assert on_h200.hardware == profile("h200-sxm", nic_bytes_per_s=7e8)
    replaced = load_scenario("quick", [NIC, "hardware=h200-sxm"])
    assert replaced.hardware == "h200-sxm"
    twice = load_scenario("quick", [NIC, "hardware.l3.mooncake.capacity_bytes=1e12"])
    assert twice.hardware == profile("h100-sxm", nic_bytes_per_s=7e8, capacity_bytes=1e12)


def test_a_profile_path_resolves_against_the_scenario_folder(tmp_path, monkeypatch) -> None:
    (tmp_path / "hw").mkdir()
    mine = profile("h100-sxm")
    mine["name"] = "mine"
    (tmp_path / "hw" / "mine.yaml").write_text(yaml.safe_dump(mine))
    d = read_yaml(ROOT / "scenarios" / "quick.yaml").data
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**d, "hardware": "hw/mine.yaml"}))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "hw").mkdir(parents=True)
    shutil.copy(HW / "b200.yaml", elsewhere / "hw" / "mine.yaml")  # a decoy beside the cwd
    monkeypatch.chdir(elsewhere)
    sc = load_scenario(tmp_path / "s.yaml", [NIC])
    assert sc.hardware == {**mine, "l3": profile("h100-sxm", nic_bytes_per_s=7e8)["l3"]}
    assert sc.hardware["name"] == "mine"
    # the Python API (and sweep's --grid): the same folder
    again = load_scenario(tmp_path / "s.yaml").with_overrides([NIC])
    assert again.hardware == sc.hardware and again.variant("L1").hardware == sc.hardware


def _with_variants(tmp_path: Path, variants: list) -> Path:
    d = read_yaml(ROOT / "scenarios" / "quick.yaml").data
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({**d, "variants": variants}))
    return path


def test_variants_keep_the_override_and_set_into_the_profile_too(tmp_path) -> None:
    path = _with_variants(tmp_path, [
        {"name": "plain", "set": {"seed": 1}},
        {"name": "slow cpu", "set": {"hardware.cpu.scheduler_step_s": 0.5}},
        {"name": "h200", "set": {"hardware": "h200-sxm"}},
        {"name": "h200 1TB", "set": {"hardware": "h200-sxm",
                                     "hardware.l3.mooncake.capacity_bytes": 1e12}}])
    got = dict(load_scenario(path, [NIC]).expand())
    slow = profile("h100-sxm", nic_bytes_per_s=7e8)
    assert got["plain"].hardware == slow
    slow["cpu"]["scheduler_step_s"] = 0.5
    assert got["slow cpu"].hardware == slow  # the variant's key and --set's, one profile
    # a variant's own set: wins over --set, as for any key: it names a whole profile
    assert got["h200"].hardware == "h200-sxm"
    assert got["h200 1TB"].hardware == profile("h200-sxm", capacity_bytes=1e12)
    alone = dict(load_scenario(path).expand())
    assert alone["slow cpu"].hardware["l3"] == profile("h100-sxm")["l3"]
    assert alone["slow cpu"].hardware["cpu"]["scheduler_step_s"] == 0.5


def test_the_model_preset_and_the_router_policy_take_dotted_keys_too() -> None:
    sc = load_scenario("quick", ["model.tensor_parallel=2", "router=cache_aware",
                                 "router.balance_abs_threshold=7"])
    assert sc.model == dataclasses.replace(load_model_spec("llama-3-8b"), tensor_parallel=2)
    assert (sc.router.policy, sc.router.balance_abs_threshold) == ("cache_aware", 7)
    assert load_scenario("quick", ["model=llama-3-70b-tp8", "model.tensor_parallel=4"]).model == (
        dataclasses.replace(load_model_spec("llama-3-70b-tp8"), tensor_parallel=4))


def test_a_resolved_scenario_takes_dotted_keys_into_its_profile(tmp_path) -> None:
    sc = load_resolved(load_scenario("quick").to_mapping())
    assert sc.with_overrides([NIC]).hardware == profile("h100-sxm", nic_bytes_per_s=7e8)


def test_unknown_keys_and_profiles_fail_naming_the_key_and_the_profile() -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario("quick", ["hardware=nope", NIC])
    assert f"--set {NIC}" in str(e.value) and "'nope'" in str(e.value)
    with pytest.raises(ScenarioError) as e:
        load_scenario("quick", ["model.num_layer=2"])
    assert "model.num_layer" in str(e.value) and "--set model.num_layer=2" in str(e.value)
    with pytest.raises(ScenarioError, match="'hardware.l3' is not a mapping"):
        load_scenario("quick", ["hardware.l3=1", NIC])
    # which keys a profile has is the simulator's to say: before anything runs
    from sim.command import check_variants

    sc = load_scenario("quick", ["hardware.l3.mooncake.nic_byte_per_s=7e8"])
    with pytest.raises(ValueError) as e:
        check_variants(sc.expand())
    assert "'h100-sxm'" in str(e.value) and "'l3.mooncake.nic_byte_per_s'" in str(e.value)
    assert "nic_bytes_per_s" in str(e.value)  # the suggestion
    assert str(e.value).startswith(f"{sc.source} [variant L1]: hardware: ")


def test_nothing_is_mutated_and_plain_keys_are_unchanged() -> None:
    d = read_yaml(ROOT / "scenarios" / "quick.yaml").data
    before = copy.deepcopy(d)
    out = apply_overrides(d, [NIC, "cache.page_size=32"], doc_base=ROOT / "scenarios")
    assert d == before and out["hardware"]["name"] == "h100-sxm"
    assert out["cache"] == {**d["cache"], "page_size": 32}
    assert apply_overrides(d, ["hardware=b200"]) == {**d, "hardware": "b200"}


# quick.yaml shrunk to a fraction of a second (tests/cli/test_run_outputs.py's TINY)
TINY = ["cache.device_tokens=2048", "cache.hicache_ratio=2", "scheduler.max_running_requests=8",
        "workload.num_clients=4", "workload.num_rounds=3", "workload.request_length=256",
        "workload.output_length=8", "workload.request_rate=100", "workload.max_parallel=4"]
FLOPS = "hardware.gpu.bf16_flops=2e14"  # changes every run's times, L3 or not


def _run(scenario: str, out: Path, *sets: str) -> dict[str, tuple[str, str]]:
    """``hicache-lab run`` into ``out``: each variant folder's requests and decisions."""
    from hicache.cli import main

    items = [x for s in sets for x in ("--set", s)]
    assert main(["run", scenario, *items, "--out", str(out), "--no-plots", "--no-trace",
                 "--no-progress"]) == 0
    return {p.name: ((p / "requests.csv").read_text(), (p / "decisions.csv").read_text())
            for p in sorted(out.iterdir()) if p.is_dir()}


def test_the_run_folders_scenario_reruns_the_run(tmp_path, capsys) -> None:
    first = _run("quick", tmp_path / "a", *TINY, NIC, FLOPS)
    saved = yaml.safe_load((tmp_path / "a" / "scenario.yaml").read_text())
    want = profile("h100-sxm", nic_bytes_per_s=7e8)
    want["gpu"]["bf16_flops"] = 2e14
    assert saved["hardware"] == want
    assert _run(str(tmp_path / "a" / "scenario.yaml"), tmp_path / "b") == first
    folder = sorted(first)[-1]  # one variant's own scenario.yaml reruns that variant
    again = _run(str(tmp_path / "a" / folder / "scenario.yaml"), tmp_path / "c")
    assert list(again.values()) == [first[folder]]
    assert _run("quick", tmp_path / "d", *TINY) != first  # the override reached the runs


def _from_sglang(*argv: str):  # noqa: ANN202 - a Scenario
    from hicache.cli import build_parser
    from sim.from_sglang import scenario_from_args

    cmd = ("python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B-Instruct "
           "--mem-fraction-static 0.5 --page-size 64")
    return scenario_from_args(build_parser().parse_args(["run", "quick", "--from-sglang",
                                                         cmd, *argv]))


def test_from_sglang_hardware_takes_dotted_keys_and_sizes_l1_by_them(tmp_path,
                                                                     monkeypatch) -> None:
    sc = _from_sglang("--hardware", "h200-sxm", "--set", NIC)
    assert sc.hardware == profile("h200-sxm", nic_bytes_per_s=7e8)
    # L1 is sized from the profile's GPU memory once --set changed it (as --gpu-memory)
    mem = _from_sglang("--set", f"hardware.gpu.memory_bytes={40 << 30}")
    assert mem.hardware["gpu"]["memory_bytes"] == 40 << 30
    assert mem.cache.device_tokens == _from_sglang("--gpu-memory", "40GiB").cache.device_tokens
    assert mem.cache.device_tokens < _from_sglang().cache.device_tokens
    # a --hardware path is relative to the cwd (quick.yaml's folder has no hw/)
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "mine.yaml").write_text(yaml.safe_dump({**profile("b200"),
                                                                "name": "mine"}))
    monkeypatch.chdir(tmp_path)
    sc = _from_sglang("--hardware", "hw/mine.yaml", "--set", NIC)
    assert sc.hardware == {**profile("b200", nic_bytes_per_s=7e8), "name": "mine"}
