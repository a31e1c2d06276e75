"""The constraint markers mean the same to both readers: pydantic at the input edge and
plain construction (``conform``) everywhere else accept the same values and normalise them
alike, field by field and config by config; configs import without pydantic."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.config import CacheConfig, StorageExtraConfig
from hicache.modelspec import ModelSpec
from hicache.routing import RouterConfig
from hicache.scenario.sections import RunSection, SchedulerSection
from hicache.schema.adapters import SchemaErrors, validate
from hicache.schema.plain import build, conform_value
from hicache.schema.types import (
    Bool,
    Float,
    Int,
    NonEmptyStr,
    NonNegFloat,
    PosInt,
    Str,
    float_,
    int_,
)
from hicache.workload.factory import KINDS
from hicache.workload.params import FloatRange, Length, Rate

values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**62 - 2),
    st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e12, 2.5, 1e400,
                                  10**400, -(2**64), 2**62, 2**62 + 1]),
    st.text(max_size=6), st.sampled_from(["inf", "1e12", "yes", "", "full", "swa", "lru"]),
    st.lists(st.one_of(st.integers(-3, 10**6), st.floats(-1, 1e6)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
FIELD_TYPES = {"Int": Int, "PosInt": PosInt, "page": int_(ge=1, le=1 << 20), "Float": Float,
               "NonNegFloat": NonNegFloat, "ratio": float_(gt=1.0),
               "unit": float_(ge=0.0, le=1.0), "Bool": Bool, "Str": Str,
               "NonEmptyStr": NonEmptyStr, "Length": Length(), "Length0": Length(0),
               "Rate": Rate, "FloatRange": FloatRange, "OptionalPosInt": PosInt | None}


def _edge(tp: object, v: object) -> tuple[bool, object]:
    try:
        return True, validate(tp, v)
    except SchemaErrors:
        return False, None


def _plain(tp: object, v: object) -> tuple[bool, object]:
    try:
        return True, conform_value(tp, v)
    except ValueError:
        return False, None


def _same(a: tuple[bool, object], b: tuple[bool, object]) -> bool:
    if a[0] != b[0]:
        return False
    x, y = a[1], b[1]
    return x == y and type(x) is type(y) or (x != x and y != y)  # NaN never passes anyway


@pytest.mark.parametrize("name", sorted(FIELD_TYPES))
@settings(max_examples=150, deadline=None)
@given(v=values)
def test_a_marker_accepts_and_normalises_alike_for_both_readers(name, v):
    tp = FIELD_TYPES[name]
    edge, plain = _edge(tp, v), _plain(tp, v)
    assert _same(edge, plain), (name, v, edge, plain)


@pytest.mark.parametrize("v, expected", [(4e6, 4_000_000), (64.0, 64), (7, 7)])
def test_integral_floats_are_integers_for_both_readers(v, expected):
    assert type(conform_value(PosInt, v)) is int and conform_value(PosInt, v) == expected
    assert validate(PosInt, v) == expected


CONFIGS = [CacheConfig, StorageExtraConfig, ModelSpec, RouterConfig, RunSection,
           SchedulerSection, *(cfg for cfg, _ in KINDS.values())]


def _base(cls: type) -> dict:
    if cls is ModelSpec:
        return ModelSpec.tiny().to_mapping()
    return {}


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_a_config_built_plainly_equals_the_validated_one_or_both_refuse(cls, data):
    names = [f.name for f in dataclasses.fields(cls) if f.name != "kind"]
    doc = _base(cls)
    for key in data.draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        doc[key] = data.draw(values)
    edge, plain = _edge(cls, doc), None
    try:
        plain = (True, build(cls, doc))
    except ValueError:
        plain = (False, None)
    assert edge[0] == plain[0], (doc, edge, plain)
    assert edge[1] == plain[1]


def test_a_config_built_directly_is_checked_and_names_the_key():
    with pytest.raises(ValueError, match="^page_size: expected a value >= 1, got 0$"):
        CacheConfig(page_size=0)
    with pytest.raises(ValueError, match="^hicache_write_policy: got 'write_around'"):
        CacheConfig(hicache_write_policy="write_around")
    with pytest.raises(ValueError, match="protocol: got 'udp'"):
        CacheConfig(hicache_storage_backend_extra_config={"protocol": "udp"})
    assert CacheConfig(device_tokens=1e6).device_tokens == 1_000_000


def test_the_json_schema_keeps_the_bounds_the_markers_declare():
    from hicache.schema.adapters import json_schema

    props = json_schema(CacheConfig)["properties"]
    assert props["page_size"] | {"type": "integer", "minimum": 1, "maximum": 1 << 20} \
        == props["page_size"]
    assert props["hicache_ratio"]["exclusiveMinimum"] == 1.0
    assert props["enable_hierarchical_cache"]["type"] == "boolean"
