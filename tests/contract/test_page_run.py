"""page_run (the runs a runtime builds from pool pages, its slots set directly without
PageRun's check) is the very value PageRun builds: equal, hashing alike, frozen, pickling
alike, every field read back; coalesce builds its runs so and still refuses what PageRun
refuses. extent_of_runs (the extent of an allocation's runs, its pairs kept) is the
constructor's extent, and runs() lists an extent's pairs alike however it was built."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    PageRun,
    Tier,
    coalesce,
    extent_of_runs,
    page_run,
)


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


_CACHES = ("_count", "_runs")  # CacheExtentRef's cached reads (compare=False)


def test_extent_of_runs_equals_the_constructor_and_lists_its_runs_once() -> None:
    """extent_of_runs (a pool allocation's runs, the pairs kept) is the constructor's
    value: equal, hashing and pickling alike, frozen, every field read back; its runs()
    are the pairs of its page runs, a new list each call (a caller changing one changes
    neither the extent nor a later call's), as a constructed extent's are."""
    runs = [(40, 3), (7, 1), (12, 5)]
    fast = extent_of_runs("rt", 2, Tier.HOST, runs, Kind.SWA)
    ref = CacheExtentRef("rt", 2, Tier.HOST, tuple(PageRun(s, n) for s, n in runs), Kind.SWA)
    assert type(fast) is CacheExtentRef
    assert fast == ref and hash(fast) == hash(ref)
    for f in dataclasses.fields(ref):
        if f.name not in _CACHES:
            assert getattr(fast, f.name) == getattr(ref, f.name), f.name
    assert all(type(r) is PageRun for r in fast.page_runs)
    assert pickle.loads(pickle.dumps(fast)) == ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tier = Tier.DEVICE  # type: ignore[misc]
    runs.append((99, 1))  # the caller's list is its own: the extent kept its pairs
    for ext in (fast, ref, ref):  # ref twice: listed on the first call, kept after
        got = ext.runs()
        assert got == [(40, 3), (7, 1), (12, 5)] and type(got) is list
        got.append((1, 1))
        got[0] = (0, 1)
        assert ext.runs() == [(40, 3), (7, 1), (12, 5)]
    assert fast.num_pages == ref.num_pages == 9
    assert fast.split(2)[1].runs() == [(42, 1), (7, 1), (12, 5)]
    assert fast.slice(3, 5).runs() == [(7, 1), (12, 1)]


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 6)), max_size=8),
       st.integers(0, 60))
def test_runs_are_the_page_runs_pairs_after_any_cut(runs: list[tuple[int, int]],
                                                    at: int) -> None:
    """runs() of an extent, built either way, and of its parts, is the pairs of its page
    runs: a kept list never goes stale (extents are frozen; every cut is a new one)."""
    fast = extent_of_runs("rt", 1, Tier.DEVICE, runs, Kind.FULL)
    counted = extent_of_runs("rt", 1, Tier.DEVICE, runs, Kind.FULL, sum(n for _, n in runs))
    ref = CacheExtentRef("rt", 1, Tier.DEVICE, tuple(PageRun(s, n) for s, n in runs))
    assert counted.num_pages == ref.num_pages == len(list(ref.pages())) == fast.num_pages
    for ext in (fast, counted, ref):
        assert ext.runs() == [(r.first_page, r.page_count) for r in ext.page_runs] == runs
        if 0 < at < ext.num_pages:
            for part in ext.split(at):
                part.runs()
                assert part.runs() == [(r.first_page, r.page_count) for r in part.page_runs]
        assert ext.runs() == runs
