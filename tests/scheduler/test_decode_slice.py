"""decode_slice (the scheduler's per-request decode slice, its slots set directly) is the
very value the RequestSlice constructor builds: equal, hashing alike, frozen, pickling
alike, every field read back."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from hicache.runtime.handles import RequestRuntimeHandle
from hicache.runtime.interface import Phase, RequestSlice, decode_slice


@pytest.mark.parametrize("finishes", [False, True])
def test_decode_slice_equals_the_constructor(finishes: bool) -> None:
    h = RequestRuntimeHandle("sim0", 7, 3)
    fast = decode_slice(42, 1000, h, finishes)
    ref = RequestSlice(42, Phase.DECODE, 1000, 1, request=h, finishes=finishes)
    assert type(fast) is RequestSlice
    assert fast == ref and hash(fast) == hash(ref)
    assert dataclasses.astuple(fast) == dataclasses.astuple(ref)
    for f in dataclasses.fields(RequestSlice):  # every slot set, to the constructor's value
        assert getattr(fast, f.name) == getattr(ref, f.name), f.name
    assert pickle.loads(pickle.dumps(fast)) == ref
    assert dataclasses.replace(fast, context_tokens=5) == dataclasses.replace(
        ref, context_tokens=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.context_tokens = 1  # type: ignore[misc]


def test_decode_slice_differs_where_the_values_differ() -> None:
    h = RequestRuntimeHandle("sim0", 7, 3)
    base = decode_slice(1, 10, h, False)
    assert base != decode_slice(2, 10, h, False)
    assert base != decode_slice(1, 11, h, False)
    assert base != decode_slice(1, 10, RequestRuntimeHandle("sim0", 8, 3), False)
    assert base != decode_slice(1, 10, h, True)
