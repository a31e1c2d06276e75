"""page_run (the runs a runtime builds from pool pages, its slots set directly without
PageRun's check) is the very value PageRun builds: equal, hashing alike, frozen, pickling
alike, every field read back; coalesce builds its runs so and still refuses what PageRun
refuses."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from hicache.runtime.handles import PageRun, coalesce, page_run


def _same(fast: Any, ref: Any) -> None:
    assert type(fast) is type(ref)
    assert fast == ref and hash(fast) == hash(ref)
    for f in dataclasses.fields(ref):
        assert getattr(fast, f.name) == getattr(ref, f.name), f.name
    assert pickle.loads(pickle.dumps(fast)) == ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, dataclasses.fields(ref)[0].name, None)


def test_page_run_equals_the_constructor_and_coalesce_still_refuses_a_negative_page() -> None:
    """page_run (pool pages: no re-check) is PageRun's value; coalesce builds its runs so
    and still refuses what PageRun refuses (a negative page)."""
    _same(page_run(7, 3), PageRun(7, 3))
    assert page_run(7, 3).pages() == range(7, 10)
    assert coalesce([4, 5, 6, 0, 9, 10]) == (PageRun(4, 3), PageRun(0, 1), PageRun(9, 2))
    assert all(type(r) is PageRun for r in coalesce([4, 5, 0]))
    with pytest.raises(ValueError, match=r"invalid PageRun\(-2, 2\)"):
        coalesce([3, -2, -1])
