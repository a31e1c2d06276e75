"""Scenario files: one typed Scenario, dotted overrides, variants, errors naming file,
line and key."""

import dataclasses
import textwrap

import pytest

from hicache.scenario import (
    DEFAULT_MODEL,
    RUN_KEYS,
    SCHEDULER_KEYS,
    Scenario,
    ScenarioError,
    Variant,
    apply_overrides,
    load_scenario,
)
from hicache.scheduler.scheduler import SCHEDULER_KEYS as SCHEDULER_CONFIG_KEYS
from hicache.workload.agent import AgentConfig

BASE = """\
name: multiturn
seed: 7
cache:
  page_size: 64
  enable_hierarchical_cache: true
workload:
  kind: multiturn
  num_clients: 48
variants:
  - name: l1_only
    set: {cache.enable_hierarchical_cache: false}
  - name: l3
    set:
      cache.hicache_storage_backend: mooncake
      cache.hicache_storage_prefetch_policy: timeout
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_load_returns_a_frozen_typed_scenario(tmp_path):
    s = load_scenario(write(tmp_path, BASE))
    assert isinstance(s, Scenario) and s.seed == 7 and s.workload.num_clients == 48
    assert s.model.name == DEFAULT_MODEL and s.model.kv_bytes_per_token() == 128 * 1024
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 3


def test_overrides_parse_values_as_yaml():
    d = apply_overrides(
        {"name": "x", "cache": {"page_size": 64}},
        ["cache.page_size=32", "workload.num_clients=8", "router.policy=cache_aware",
         "cache.hicache_storage_backend=null", "cache.device_tokens=1e6"],
    )
    assert d["cache"]["page_size"] == 32
    assert d["workload"]["num_clients"] == 8  # missing sections are created
    assert d["router"]["policy"] == "cache_aware"
    assert d["cache"]["hicache_storage_backend"] is None
    assert d["cache"]["device_tokens"] == 1e6  # a number, not the string '1e6'


def test_overrides_do_not_mutate_their_input():
    base = {"name": "x", "cache": {"page_size": 64}}
    apply_overrides(base, ["cache.page_size=1"])
    assert base["cache"]["page_size"] == 64


def test_override_of_an_unknown_top_level_key_names_it_and_suggests():
    with pytest.raises(ScenarioError, match="cahce: unknown key .did you mean 'cache'"):
        apply_overrides({"name": "x"}, ["cahce.page_size=32"])


def test_override_without_equals_or_through_a_scalar_raises():
    with pytest.raises(ScenarioError, match="key=value"):
        apply_overrides({"name": "x"}, ["cache.page_size"])
    with pytest.raises(ScenarioError, match="'seed' is not a mapping"):
        apply_overrides({"name": "x", "seed": 1}, ["seed.value=2"])


@pytest.mark.parametrize("item", ["cache=", "cache=null", "scheduler=3", "workload=abc"])
def test_an_override_never_wipes_a_section(item):
    d = {"name": "x", "cache": {"page_size": 32}}
    with pytest.raises(ScenarioError, match="is a section; set its keys"):
        apply_overrides(d, [item])


def test_a_mapping_override_of_a_section_updates_only_its_keys():
    d = apply_overrides({"name": "x", "cache": {"page_size": 32}},
                        ["cache={device_tokens: 4096}"])
    assert d["cache"] == {"page_size": 32, "device_tokens": 4096}


def test_overrides_are_validated_like_the_file_and_named(tmp_path):
    s = load_scenario(write(tmp_path, BASE), ["cache.page_size=16"])
    assert s.cache.page_size == 16 and all(v.cache.page_size == 16 for _, v in s.expand())
    with pytest.raises(ScenarioError, match=r"--set cache.page_size=0\): cache.page_size: "
                                            r"expected a value >= 1, got 0"):
        load_scenario(write(tmp_path, BASE), ["cache.page_size=0"])
    s2 = s.with_overrides(["scheduler.overlap=false"])
    assert s2.scheduler.overlap is False and s.scheduler.overlap is True


def test_variants_expand_over_the_base_and_are_validated(tmp_path):
    s = load_scenario(write(tmp_path, BASE))
    out = s.expand()
    assert [n for n, _ in out] == ["l1_only", "l3"]
    l1, l3 = out[0][1], out[1][1]
    assert l1.cache.enable_hierarchical_cache is False and l1.cache.page_size == 64
    assert l3.cache.hicache_storage_backend == "mooncake"
    assert l3.cache.enable_hierarchical_cache is True  # untouched keys come from the base
    assert l1.variants == () and l1.workload.num_clients == 48
    assert l3.cache.hicache_storage_prefetch_policy == "timeout"
    assert s.variant("l3") == l3


def test_no_variants_gives_the_base_under_its_name():
    s = Scenario.from_mapping({"name": "solo", "seed": 1, "workload": {"kind": "agent"}})
    assert s.expand() == [("solo", s)]


def test_bad_variants_raise():
    wl = {"kind": "multiturn"}
    with pytest.raises(ScenarioError, match="duplicate variant name 'a'"):
        Scenario.from_mapping({"name": "x", "workload": wl,
                               "variants": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ScenarioError, match=r"variants\[0\].sets: unknown key"):
        Scenario.from_mapping({"name": "x", "workload": wl,
                               "variants": [{"name": "a", "sets": {}}]})
    with pytest.raises(ScenarioError, match="cash: unknown key"):
        Scenario.from_mapping({"name": "x", "workload": wl,
                               "variants": [{"name": "a", "set": {"cash.x": 1}}]})


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    p = write(tmp_path, "name: x\ncache:\n  page_size: [64\nseed: 1\n", name="broken.yaml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:4:") and "YAML syntax error" in msg


def test_a_section_given_twice_is_an_error_naming_both_lines(tmp_path):
    p = write(tmp_path, "name: x\ncache: {page_size: 16}\nworkload: {kind: agent}\n"
                        "cache: {page_size: 32}\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:4:1: duplicate key 'cache' "
                                            r"\(first given on line 2\)"):
        load_scenario(p)


def test_unknown_top_level_key_names_file_line_and_key(tmp_path):
    p = write(tmp_path, "name: x\nworkload: {kind: agent}\nworkloads: {}\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:3: workloads: unknown key "
                                            r"\(did you mean 'workload'\?\)"):
        load_scenario(p)


def test_name_and_workload_are_required(tmp_path):
    with pytest.raises(ScenarioError, match="name: required"):
        load_scenario(write(tmp_path, "seed: 1\nworkload: {kind: agent}\n"))
    with pytest.raises(ScenarioError, match="workload: required"):
        load_scenario(write(tmp_path, "name: x\n"))


def test_cache_section_errors_name_file_line_and_key(tmp_path):
    p = write(tmp_path, "name: x\nworkload: {kind: agent}\ncache:\n"
                        "  hicache_write_polcy: write_back\n", name="c.yaml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:4: cache.hicache_write_polcy: unknown key")
    assert "'hicache_write_policy'" in msg


def test_a_bad_cache_value_inside_a_variant_names_the_variant(tmp_path):
    text = BASE + "  - name: bad\n    set: {cache.hicache_ratio: 0.5}\n"
    with pytest.raises(ScenarioError, match=r"\[variant bad\]:17: cache.hicache_ratio: "
                                            r"expected a value > 1.0, got 0.5"):
        load_scenario(write(tmp_path, text))


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(ScenarioError, match="nope.yaml.*not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_run_and_scheduler_keys_exist_once_and_match_the_scheduler():
    assert SCHEDULER_KEYS == SCHEDULER_CONFIG_KEYS
    assert "swa_tokens" in RUN_KEYS and "torch_profiler" in RUN_KEYS


def test_to_mapping_validates_back_to_the_same_scenario(tmp_path):
    s = load_scenario(write(tmp_path, BASE))
    again = Scenario.from_mapping(s.to_mapping(), base=tmp_path)
    assert again == s and [v for _, v in again.expand()] == [v for _, v in s.expand()]


def test_a_scenario_built_directly_still_expands_its_variants():
    s = Scenario(name="x", workload=AgentConfig(),
                 variants=(Variant(name="a", set={"seed": 3}), Variant(name="b")))
    assert [(n, v.seed) for n, v in s.expand()] == [("a", 3), ("b", 0)]


def test_a_scenario_built_directly_takes_typed_sections_only():
    with pytest.raises(ValueError, match=r"workload: expected .*AgentConfig.*from_mapping"):
        Scenario(name="x", workload={"kind": "agent"})
