"""A request row's runs stay ``coalesce(pages)`` however its pages arrive: page by page
(:meth:`RequestRow.append`) or an extent's runs at a time (:meth:`append_extent`)."""

from __future__ import annotations

import random

import pytest

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    PageRun,
    RequestRuntimeHandle,
    Tier,
    coalesce,
)
from hicache.runtime.page_ids import runs_of
from sim.rows import RequestRow


def _ext(runs: list[tuple[int, int]]) -> CacheExtentRef:
    """An extent with exactly these runs (adjacent ones left unmerged on purpose)."""
    return CacheExtentRef("sim0", 1, Tier.DEVICE, tuple(PageRun(s, n) for s, n in runs),
                          Kind.FULL)


def _row() -> RequestRow:
    return RequestRow(RequestRuntimeHandle("sim0", 0, 1), rid=7)


def test_append_extent_merges_runs_that_continue_each_other_and_the_row() -> None:
    row = _row()
    row.append_extent(_ext([(0, 2)]))
    row.append_extent(_ext([(2, 2), (4, 1), (9, 2)]))  # continues the row, then itself
    row.append([11, 12], own=True)
    assert row.pages == [0, 1, 2, 3, 4, 9, 10, 11, 12]
    assert row.runs == [PageRun(0, 5), PageRun(9, 4)]
    assert row.own == {11, 12}  # an extent's pages are borrowed
    assert row.extent().page_runs == coalesce(row.pages)


def test_borrowed_pages_come_before_own_ones() -> None:
    row = _row()
    row.append([0, 1], own=True)
    with pytest.raises(ValueError, match="borrowed pages after its own"):
        row.append_extent(_ext([(2, 2)]))
    with pytest.raises(ValueError, match="borrowed pages after its own"):
        row.append([5], own=False)
    assert row.pages == [0, 1] and row.own == {0, 1}


def test_own_runs_are_the_runs_of_the_own_pages_in_order() -> None:
    """The runs a Release frees from: a wrong cut (a borrowed page kept, an own one
    dropped, a split run not joined) differs from runs_of of the own pages."""
    rng = random.Random(5)
    for _ in range(300):
        row = _row()
        pool = list(range(60))
        rng.shuffle(pool)
        pool = sorted(pool[:rng.randint(0, 40)]) if rng.random() < 0.5 else pool
        taken = 0
        for _ in range(rng.randint(0, 3)):  # attached and loaded extents first
            n = rng.randint(1, 6)
            row.append_extent(CacheExtentRef("sim0", 1, Tier.DEVICE,
                                             coalesce(pool[taken:taken + n]), Kind.FULL))
            taken += n
        own: list[int] = []
        for _ in range(rng.randint(0, 4)):  # then own pages, a few at a time
            n = rng.randint(1, 5)
            row.append(pool[taken:taken + n], own=True)
            own += pool[taken:taken + n]
            taken += n
        assert row.own_runs() == runs_of(own)


def test_append_extent_gives_the_row_append_gives() -> None:
    rng = random.Random(3)
    for _ in range(200):
        by_pages, by_runs = _row(), _row()
        nxt = 0
        for _ in range(rng.randint(1, 6)):
            runs = []
            for _ in range(rng.randint(0, 4)):
                nxt += rng.choice((0, 0, 1, 5))  # often continuing the run before
                n = rng.randint(1, 3)
                runs.append((nxt, n))
                nxt += n
            ext = _ext(runs)
            by_pages.append(list(ext.pages()), own=False)
            by_runs.append_extent(ext)
        assert by_runs.pages == by_pages.pages
        assert by_runs.runs == by_pages.runs == list(coalesce(by_pages.pages))
        assert by_runs.extent() == by_pages.extent()


def test_append_extent_of_nothing_keeps_the_row_extent() -> None:
    row = _row()
    row.append([3], own=True)
    ext = row.extent()
    row.append_extent(_ext([]))
    assert row.extent() is ext
