"""Fuzzing the loaders: random, truncated and mutated documents (wrong types, unknown keys,
negative, huge, NaN) each load or fail with a message that names the source; never a
traceback (any exception other than the loaders' ValueErrors fails the test)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hicache.modelspec import load_model_spec
from hicache.scenario import Scenario, ScenarioError, load_scenario
from hicache.schema.errors import InputError
from hicache.schema.yamlio import read_yaml
from sim.hardware.profile import load_profile

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
QUICK = (SCENARIOS / "quick.yaml").read_text()
QUICK_DATA = yaml.safe_load(QUICK)
MODEL = read_yaml(SCENARIOS / "models" / "llama-3-8b.yaml").data
HARDWARE = read_yaml(SCENARIOS / "hardware" / "h100-sxm.yaml").data
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                     HealthCheck.too_slow])

nasty = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**62),
    st.integers(max_value=-1), st.floats(), st.sampled_from([math.nan, math.inf, -math.inf,
                                                             1e400, -0.0, 1e-320]),
    st.text(max_size=12), st.sampled_from(["inf", "1e12", "yes", "", "..", "full"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=6), st.integers(),
                                                         max_size=2),
)
documents = st.recursive(
    nasty, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                   st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20)


def _paths(d: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(data: dict, path: tuple, value: object, rename: bool) -> dict:
    out = copy.deepcopy(data)
    node = out
    for p in path[:-1]:
        node = node[p]
    if rename and isinstance(node, dict):
        node[f"{path[-1]}x"] = node.pop(path[-1])  # an unknown key
    else:
        node[path[-1]] = value
    return out


def _write(tmp: Path, text: str) -> Path:
    p = tmp / "fuzz.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def _load_or_name_the_file(p: Path) -> None:
    try:
        assert isinstance(load_scenario(p), Scenario)
    except ScenarioError as e:
        assert str(e).startswith(str(p)), str(e)


@FUZZ
@given(doc=documents)
def test_random_documents_load_or_fail_naming_the_file(tmp_path_factory, doc):
    p = _write(tmp_path_factory.mktemp("f"), yaml.safe_dump(doc))
    _load_or_name_the_file(p)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(QUICK)))
def test_truncated_documents_load_or_fail_naming_the_file(tmp_path_factory, cut):
    _load_or_name_the_file(_write(tmp_path_factory.mktemp("f"), QUICK[:cut]))


@FUZZ
@given(data=st.data())
def test_mutated_scenarios_load_or_fail_naming_file_and_key(tmp_path_factory, data):
    path = data.draw(st.sampled_from(_paths(QUICK_DATA)))
    doc = _mutate(QUICK_DATA, path, data.draw(nasty), data.draw(st.booleans()))
    p = _write(tmp_path_factory.mktemp("f"), yaml.safe_dump(doc))
    try:
        load_scenario(p)
    except ScenarioError as e:
        assert str(e).startswith(str(p)), str(e)


@FUZZ
@given(key=st.sampled_from(["seed", "replicas", "router", "model", "cache.page_size",
                            "cache.device_tokens", "cache.hicache_ratio", "workload",
                            "workload.num_clients", "workload.request_rate", "run.max_sim_time",
                            "scheduler.overlap", "variants", "cache", "nope.x", "cache..x"]),
       value=st.text(max_size=15))
def test_random_overrides_load_or_fail_naming_the_file(key, value):
    try:
        load_scenario(SCENARIOS / "quick.yaml", [f"{key}={value}"])
    except ScenarioError as e:
        assert "quick.yaml" in str(e).splitlines()[0], str(e)


PRESETS = [(MODEL, load_model_spec, InputError, "<model>"),
           (HARDWARE, load_profile, ValueError, "<mapping>")]


@pytest.mark.parametrize("base, load, error, source", PRESETS, ids=["model", "hardware"])
@FUZZ
@given(data=st.data())
def test_mutated_presets_load_or_fail_naming_the_source(base, load, error, source, data):
    path = data.draw(st.sampled_from(_paths(base)))
    doc = _mutate(base, path, data.draw(nasty), data.draw(st.booleans()))
    try:
        load(doc)
    except error as e:
        assert str(e).startswith(source), str(e)
