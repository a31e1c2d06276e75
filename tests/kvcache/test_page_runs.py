"""Run arithmetic on page ids (hicache.runtime.page_ids) against the page-by-page version
it replaces: the replay executor frees a released row's pages less those the tree kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hicache.runtime.page_ids import runs_minus, runs_of

pages = st.lists(st.integers(0, 80), unique=True, max_size=60)


@given(pages, pages, st.booleans())
def test_runs_minus_is_the_page_by_page_difference(own: list[int], kept: list[int],
                                                   split_kept: bool) -> None:
    # the kept extents may overlap each other and come in any order
    remove = runs_of(kept) + (runs_of(sorted(kept)[::2]) if split_kept else [])
    drop = set(kept)
    assert runs_minus(runs_of(own), remove) == runs_of([p for p in own if p not in drop])


def test_runs_minus_keeps_the_order_and_joins_what_continues() -> None:
    assert runs_minus([(10, 5), (0, 3), (15, 2)], [(12, 2)]) == [(10, 2), (14, 1), (0, 3),
                                                                 (15, 2)]
    assert runs_minus([(0, 4), (4, 4)], []) == [(0, 8)]
    assert runs_minus([(0, 8)], [(0, 8), (2, 3)]) == []
