"""``calibrated.shape`` (optional): the model shape a profile's tables were measured with."""

from __future__ import annotations

import copy

import pytest
from simtoys import TOY_PROFILE

from sim.hardware.profile import load_profile

SHAPE = {"name": "tiny", "num_layers": 4, "num_heads": 4, "num_kv_heads": 2,
         "head_dim": 16, "layers": ["full"] * 4, "dtype_bytes": 4}


def with_calibrated(**cal) -> dict:
    data = copy.deepcopy(TOY_PROFILE)
    data["calibrated"] = {"device": "cpu", **cal}
    return data


def test_the_shape_is_kept_as_a_mapping() -> None:
    prof = load_profile(with_calibrated(shape=SHAPE))
    assert prof.calibrated is not None
    got = prof.calibrated.shape_mapping()
    assert got["name"] == "tiny" and got["num_layers"] == 4
    assert got["layers"] == ("full",) * 4  # lists become tuples (the profile is frozen)


def test_a_profile_without_a_shape_still_loads() -> None:
    prof = load_profile(with_calibrated())
    assert prof.calibrated is not None and prof.calibrated.shape_mapping() == {}


@pytest.mark.parametrize("shape,match", [
    ({"num_layers": 4}, "calibrated.shape.name"),
    ({"name": "x", "num_layers": {"a": 1}}, "calibrated.shape.num_layers"),
    ({"name": "x", "layers": [["full"]]}, "calibrated.shape.layers"),
    ("tiny", "calibrated.shape must be a mapping"),
])
def test_a_malformed_shape_names_the_key(shape, match) -> None:
    with pytest.raises(ValueError, match=match):
        load_profile(with_calibrated(shape=shape))
