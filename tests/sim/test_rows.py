"""A request row's runs stay ``coalesce(pages)`` however its pages arrive: page by page
(:meth:`RequestRow.append`) or an extent's runs at a time (:meth:`append_extent`)."""

from __future__ import annotations

import random

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    PageRun,
    RequestRuntimeHandle,
    Tier,
    coalesce,
)
from sim.rows import RequestRow


def _ext(runs: list[tuple[int, int]]) -> CacheExtentRef:
    """An extent with exactly these runs (adjacent ones left unmerged on purpose)."""
    return CacheExtentRef("sim0", 1, Tier.DEVICE, tuple(PageRun(s, n) for s, n in runs),
                          Kind.FULL)


def _row() -> RequestRow:
    return RequestRow(RequestRuntimeHandle("sim0", 0, 1), rid=7)


def test_append_extent_merges_runs_that_continue_each_other_and_the_row() -> None:
    row = _row()
    row.append([0, 1], own=True)
    row.append_extent(_ext([(2, 2), (4, 1), (9, 2)]))  # continues the row, then itself
    assert row.pages == [0, 1, 2, 3, 4, 9, 10]
    assert row.runs == [PageRun(0, 5), PageRun(9, 2)]
    assert row.own == {0, 1}  # an extent's pages are borrowed
    assert row.extent().page_runs == coalesce(row.pages)


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
