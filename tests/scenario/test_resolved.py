"""Resolved scenarios: what the input edge validated is rebuilt, equal, without pydantic
(the trusted constructor), from a mapping, a JSON file or the SCENARIO argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hicache.presets import known
from hicache.scenario import (
    Scenario,
    ScenarioError,
    as_scenario,
    load_resolved,
    load_scenario,
    write_resolved,
)
from hicache.scenario.resolved import resolved_document

ROOT = Path(__file__).resolve().parents[2]


def _loadable(name: str) -> bool:
    try:
        load_scenario(name)
    except ScenarioError:  # a trace under shared/ that this checkout lacks
        return False
    return True


BUNDLED = [n for n in known("scenarios") if _loadable(n)]


def _variants(sc: Scenario) -> list[tuple[str, Scenario]]:
    return [(n, v) for n, v in sc.expand()]


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_scenario_is_rebuilt_equal_from_its_resolved_document(name, tmp_path):
    sc = load_scenario(name)
    path = write_resolved(sc, tmp_path / "scenario.resolved.json")
    for again in (load_resolved(resolved_document(sc)), load_resolved(path),
                  load_scenario(path), as_scenario(json.loads(path.read_text()))):
        assert again == sc and _variants(again) == _variants(sc)
        assert again.to_mapping() == sc.to_mapping()


def test_a_bare_to_mapping_loads_back_and_each_variant_alone_too():
    sc = load_scenario("quick")
    assert load_resolved(sc.to_mapping()) == sc
    for name, v in sc.expand():
        assert load_resolved(v.to_mapping()) == v, name
        assert load_resolved(v.to_mapping()).workload.request_length == \
            v.workload.request_length


OVERRIDES = ["cache.page_size=16", "cache.page_size=1e1", "workload.request_length=[10, 20]",
             "router=cache_aware", "router={policy: cache_aware, cache_threshold: 0.3}",
             "replicas=2", "workload.request_rate=inf", "cache.hicache_storage_backend=file",
             "cache.enable_hierarchical_cache=true", "run.max_sim_time=5", "seed=9",
             "model=hybrid-swa-mamba", "model=llama-3-70b-tp8", "hardware=b200",
             "model={name: m, num_layers: 2, num_heads: 4, num_kv_heads: 2, head_dim: 8, "
             "hidden_size: 32, ffn_size: 64, layers: [full, swa]}",
             "cache.hicache_storage_backend_extra_config={prefetch_threshold: 3}",
             'cache.hicache_storage_backend_extra_config="{\\"protocol\\": \\"tcp\\"}"',
             "scheduler.overlap=false", "cache.hicache_size=1", "cache.hicache_buffer_only=true",
             "workload={kind: agent}", "variants=[{name: a, set: {seed: 2}}]", "variants=[]"]


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.sampled_from(OVERRIDES), max_size=4))
def test_whatever_validates_is_rebuilt_equal_through_json(items):
    try:
        sc = load_scenario("quick", items)
    except ScenarioError:
        assume(False)
    again = load_resolved(json.loads(json.dumps(resolved_document(sc))))
    assert again == sc and _variants(again) == _variants(sc)


def test_overrides_reach_the_resolved_document():
    sc = load_scenario("quick", ["cache.page_size=16", "workload.request_rate=inf"])
    again = load_resolved(json.loads(json.dumps(resolved_document(sc))))
    assert again.cache.page_size == 16 and again.workload.request_rate == float("inf")
    assert again == sc


@pytest.mark.parametrize("key, value, message", [
    ("cache", {"page_size": 0}, "cache: page_size: expected a value >= 1, got 0"),
    ("seed", -1, "seed: expected a value >= 0"),
    ("model", "llama-3-8b", "model: expected a mapping for ModelSpec"),
    ("workload", {"kind": "chat"}, "workload: unknown kind 'chat'"),
    ("cahce", {}, "unknown keys ['cahce']"),
])
def test_tampered_resolved_data_fails_naming_the_key(key, value, message):
    data = load_scenario("quick").variant("L1").to_mapping()
    data[key] = value
    with pytest.raises(ScenarioError) as e:
        load_resolved(data)
    assert str(e.value).startswith("<resolved scenario>: not a resolved scenario: ")
    assert message in str(e.value)


def test_a_file_that_is_no_resolved_document_is_refused_naming_it(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    with pytest.raises(ScenarioError, match=r"r.json:1:2: not JSON"):
        load_resolved(bad)
    doc = resolved_document(load_scenario("quick"))
    bad.write_text(json.dumps({**doc, "version": 99}))
    with pytest.raises(ScenarioError, match="version 99; expected"):
        load_resolved(bad)
    bad.write_text(json.dumps({**doc, "variants": {"L1": doc["variants"]["L1"]}}))
    with pytest.raises(ScenarioError, match="variants: expected one resolved mapping"):
        load_resolved(bad)


def test_the_resolve_command_validates_then_writes(tmp_path, capsys):
    from hicache.scenario.__main__ import resolve

    out = tmp_path / "s.resolved.json"
    assert resolve(["quick", str(out), "--set", "seed=4"]) == 0
    assert load_resolved(out).seed == 4 and load_resolved(out).variant("L1").seed == 4
    assert resolve(["quick", str(tmp_path / "bad.json"), "--set", "seed=x"]) == 2
    assert "seed: expected an integer, got 'x'" in capsys.readouterr().err
    assert not (tmp_path / "bad.json").exists()


def test_the_schema_command_prints_help_and_refuses_options(tmp_path, capsys, monkeypatch):
    """``--help`` prints the usage (it once wrote the schema to a file named --help)."""
    from hicache.scenario.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["--help"]) == 0
    assert "resolve SCENARIO OUT" in capsys.readouterr().out
    assert main(["--out"]) == 2
    assert "unknown option '--out'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert main(["schema.json"]) == 0
    assert (tmp_path / "schema.json").read_text().startswith("{")


def test_a_missing_resolved_file_is_named(tmp_path):
    with pytest.raises(ScenarioError, match=r"nope.json: cannot read"):
        load_resolved(tmp_path / "nope.json")
