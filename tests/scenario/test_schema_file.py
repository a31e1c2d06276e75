"""docs/scenario.schema.json is current, and it agrees with the validator on the bundled
scenarios and on a bad one (editors flag what the loader refuses)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from hicache.presets import known
from hicache.scenario import json_schema_text
from hicache.schema.yamlio import read_yaml

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "scenario.schema.json"


def test_the_committed_schema_is_current():
    assert COMMITTED.read_text() == json_schema_text(), (
        "docs/scenario.schema.json is stale: run python -m hicache.scenario "
        "docs/scenario.schema.json")


@pytest.mark.parametrize("name", known("scenarios"))
def test_every_bundled_scenario_validates_against_the_schema(name):
    schema = json.loads(COMMITTED.read_text())
    data = read_yaml(ROOT / "scenarios" / f"{name}.yaml").data
    jsonschema.validate(data, schema)


def test_the_schema_refuses_what_the_loader_refuses():
    schema = json.loads(COMMITTED.read_text())
    base = {"name": "x", "workload": {"kind": "multiturn"}}
    jsonschema.validate(base, schema)
    jsonschema.validate({**base, "router": "cache_aware", "model": "llama-3-8b"}, schema)
    for bad in ({**base, "seed": 1.5}, {**base, "replicas": 0}, {**base, "cahce": {}},
                {**base, "cache": {"page_size": 0}},
                {**base, "workload": {"kind": "multiturn", "num_clientz": 3}},
                {**base, "workload": {"kind": "chat"}}, {**base, "router": 5}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
