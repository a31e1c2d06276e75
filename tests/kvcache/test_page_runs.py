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


def _bad_page_by_page(is_used, runs, unused_in=None) -> int | None:  # noqa: ANN001
    """:meth:`PageIds.bad_runs` page by page: the first page (runs in order) for which
    ``is_used`` is false, else the later start of the first overlapping pair (runs
    sorted), else None; an empty run names what ``unused_in(start, 0)`` names (past the
    fresh mark: the mark)."""
    for s, n in runs:
        if not n and unused_in is not None:
            p = unused_in(s, 0)
            if p is not None:
                return p
        for p in range(s, s + n):
            if not is_used(p):
                return p
    ordered = sorted(runs)
    for (s0, n0), (s1, _) in zip(ordered, ordered[1:], strict=False):
        if s1 < s0 + n0:
            return s1
    return None


@given(st.sampled_from(["lowest", "lifo"]), st.integers(0, 48),
       st.lists(st.tuples(st.integers(0, 47), st.integers(1, 6)), max_size=6),
       st.lists(st.tuples(st.integers(-2, 56), st.integers(0, 9)), max_size=8))
def test_bad_runs_names_the_page_the_page_by_page_check_names(order, taken, freed,
                                                              runs) -> None:
    """bad_runs reads handed-out ids in line (one-page runs by index, longer ones by
    ``find``) and leaves runs outside them to ``unused_in``: the same page as a page by
    page check, for runs inside, across and past the fresh mark, empty and negative."""
    from hicache.runtime.page_ids import PageIds, pages_of

    ids = PageIds(64, order)
    held = set(pages_of(ids.take_runs(taken)))
    for s, n in freed:  # holes, so runs cross freed pages too
        gone = [p for p in range(s, s + n) if p in held]
        if gone:
            ids.give(gone)
            held -= set(gone)
    assert ids.bad_runs(runs) == _bad_page_by_page(ids.is_used, runs, ids.unused_in)
    if held:  # a clean list of the held pages, as runs (and their reverse)
        good = runs_of(sorted(held))
        assert ids.bad_runs(good) is None and ids.bad_runs(good[::-1]) is None
        for s, n in good:  # a held run with the free page after or before it: named
            for run in ((s, n + 1), (s - 1, n + 1)):
                named = _bad_page_by_page(ids.is_used, [run], ids.unused_in)
                assert ids.bad_runs([run]) == named is not None


@given(taken=st.lists(st.integers(1, 8), min_size=1, max_size=8),
       freed=st.lists(st.integers(0, 8), max_size=3), data=st.data())
def test_bad_runs_names_the_page_a_page_by_page_walk_names(taken, freed, data) -> None:
    """Unallocated pages (freed, never handed out, beyond the fresh mark, negative) and
    pages listed twice, by the runs a free would return: the same page as the walk. Runs
    start mostly at allocated pages, so that many pass the first check."""
    from hicache.runtime.page_ids import PageIds

    ids = PageIds(64, "lowest")
    held = [ids.take(n) for n in taken]
    for i in freed:
        if i < len(held) and held[i]:
            ids.give(held[i])
            held[i] = []
    used = {p for pages in held for p in pages}
    start = st.sampled_from(sorted(used)) if used else st.integers(-1, 70)
    runs = data.draw(st.lists(st.tuples(st.one_of(start, start, st.integers(-1, 70)),
                                        st.integers(1, 4)), max_size=6))
    assert ids.bad_runs(runs) == _bad_page_by_page(used.__contains__, runs)
