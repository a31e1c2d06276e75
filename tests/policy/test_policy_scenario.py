"""Scenario files: plain dicts, dotted overrides, variants, errors naming file, line and key."""

import textwrap

import pytest

from hicache.scenario import (
    ScenarioError,
    apply_overrides,
    cache_config,
    expand_variants,
    load_scenario,
)

BASE = """\
name: multiturn
seed: 7
cache:
  page_size: 64
  enable_hierarchical_cache: true
workload:
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


def test_load_returns_a_plain_nested_dict(tmp_path):
    d = load_scenario(write(tmp_path, BASE))
    assert type(d) is dict and d["workload"] == {"num_clients": 48}


def test_overrides_parse_values_as_yaml():
    d = apply_overrides(
        {"name": "x", "cache": {"page_size": 64}},
        [
            "cache.page_size=32",
            "workload.num_clients=8",
            "run.tags=[a, b]",
            "router.kind=rr",
            "cache.hicache_storage_backend=null",
        ],
    )
    assert d["cache"]["page_size"] == 32
    assert d["workload"]["num_clients"] == 8  # missing sections are created
    assert d["run"]["tags"] == ["a", "b"]
    assert d["router"]["kind"] == "rr"
    assert d["cache"]["hicache_storage_backend"] is None


def test_overrides_do_not_mutate_their_input():
    base = {"name": "x", "cache": {"page_size": 64}}
    apply_overrides(base, ["cache.page_size=1"])
    assert base["cache"]["page_size"] == 64


def test_override_of_an_unknown_top_level_key_names_it():
    with pytest.raises(ScenarioError, match="unknown top-level key 'cahce'"):
        apply_overrides({"name": "x"}, ["cahce.page_size=32"])


def test_override_without_equals_or_through_a_scalar_raises():
    with pytest.raises(ScenarioError, match="key=value"):
        apply_overrides({"name": "x"}, ["cache.page_size"])
    with pytest.raises(ScenarioError, match="'seed' is not a mapping"):
        apply_overrides({"name": "x", "seed": 1}, ["seed.value=2"])


def test_overrides_are_applied_before_validation_on_load(tmp_path):
    d = load_scenario(write(tmp_path, BASE), ["cache.page_size=16"])
    assert d["cache"]["page_size"] == 16
    with pytest.raises(ScenarioError, match="page_size"):
        load_scenario(write(tmp_path, BASE), ["cache.page_size=0"])


def test_variants_expand_over_the_base(tmp_path):
    out = expand_variants(load_scenario(write(tmp_path, BASE)))
    assert [n for n, _ in out] == ["l1_only", "l3"]
    l1, l3 = out[0][1], out[1][1]
    assert l1["cache"] == {"page_size": 64, "enable_hierarchical_cache": False}
    assert l3["cache"]["hicache_storage_backend"] == "mooncake"
    assert l3["cache"]["enable_hierarchical_cache"] is True  # untouched keys come from the base
    assert "variants" not in l1 and l1["workload"] == {"num_clients": 48}
    assert cache_config(l3).hicache_storage_prefetch_policy == "timeout"


def test_no_variants_gives_the_base_under_its_name():
    d = {"name": "solo", "seed": 1}
    assert expand_variants(d) == [("solo", {"name": "solo", "seed": 1})]


def test_variants_do_not_share_nested_state():
    d = {"name": "x", "cache": {}, "variants": [{"name": "a", "set": {"seed": 1}}, {"name": "b"}]}
    (_, a), (_, b) = expand_variants(d)
    a["cache"]["page_size"] = 1
    assert b["cache"] == {} and d["cache"] == {}


def test_bad_variants_raise():
    with pytest.raises(ScenarioError, match="duplicate variant name 'a'"):
        expand_variants({"name": "x", "variants": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ScenarioError, match=r"variants\[0\]: unknown key 'sets'"):
        expand_variants({"name": "x", "variants": [{"name": "a", "sets": {}}]})
    with pytest.raises(ScenarioError, match="unknown top-level key 'cash'"):
        expand_variants({"name": "x", "variants": [{"name": "a", "set": {"cash.x": 1}}]})


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    p = write(tmp_path, "name: x\ncache:\n  page_size: [64\nseed: 1\n", name="broken.yaml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert str(p) in msg and "YAML syntax error" in msg
    assert "line 4" in msg


def test_unknown_top_level_key_names_file_and_key(tmp_path):
    p = write(tmp_path, "name: x\nworkloads: {}\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml: unknown top-level key 'workloads'"):
        load_scenario(p)


def test_name_is_required(tmp_path):
    with pytest.raises(ScenarioError, match="name: required"):
        load_scenario(write(tmp_path, "seed: 1\n"))


def test_cache_section_errors_name_file_and_key(tmp_path):
    p = write(tmp_path, "name: x\ncache:\n  hicache_write_polcy: write_back\n", name="c.yaml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: cache: hicache_write_polcy: unknown key")
    assert "'hicache_write_policy'" in msg


def test_a_bad_cache_value_inside_a_variant_names_the_variant(tmp_path):
    text = BASE + "  - name: bad\n    set: {cache.hicache_ratio: 0.5}\n"
    with pytest.raises(ScenarioError, match=r"\[variant bad\]: cache: hicache_ratio"):
        load_scenario(write(tmp_path, text))


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(ScenarioError, match="nope.yaml: cannot read"):
        load_scenario(tmp_path / "nope.yaml")
