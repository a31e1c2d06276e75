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


@given(st.sampled_from(["lowest", "lifo", "fifo", "fresh"]),
       st.lists(st.tuples(st.booleans(), st.integers(1, 9), st.integers(0, 7)), max_size=40))
def test_taken_runs_are_coalesced_and_hand_out_what_the_order_says(order, steps) -> None:
    """Every take's runs are coalesced (no run continues the one before it: a runtime
    builds extents from them as they are), over any sequence of takes and frees, with
    freed runs ending where fresh ids begin; ``lowest`` hands out the lowest free ids."""
    from hicache.runtime.page_ids import PageIds, pages_of

    ids = PageIds(48, order)
    held: list[list[int]] = []
    free = set(range(48))  # lowest's reference: the free ids
    for take, n, i in steps:
        if take or not held:
            if n > ids.free:
                continue
            runs = ids.take_runs(n)
            got = pages_of(runs)
            assert len(got) == n and runs == runs_of(got)
            if order == "lowest":
                assert got == sorted(free)[:n]
            free -= set(got)
            held.append(got)
        else:
            pages = held.pop(i % len(held))
            ids.give(pages[::-1] if i % 2 else pages)  # any order, a run or pieces
            free |= set(pages)
        ids.check()
