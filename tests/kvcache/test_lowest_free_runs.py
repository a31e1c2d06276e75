"""``PageIds(order="lowest")`` keeps its freed runs sorted and coalesced (joined to the
free neighbours a give touches). What it hands out must be what the heap it replaced
handed out (freed runs in a heap by start, neighbours joined only when popped): the
lowest free ids, coalesced, whatever the order of gives and takes."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from hicache.runtime.page_ids import PageIds, Run, pages_of


class _HeapLowest:
    """The heap version ``lowest`` had before (the reference)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.fresh, self.heap = capacity, 0, []

    def take_runs(self, n: int) -> list[Run]:
        out: list[Run] = []
        heap, left = self.heap, n
        while heap and left > 0:
            s, k = heapq.heappop(heap)
            while heap and heap[0][0] == s + k:
                k += heapq.heappop(heap)[1]
            if k > left:
                heapq.heappush(heap, (s + left, k - left))
                k = left
            out.append((s, k))
            left -= k
        if left > 0:
            if out and out[-1][0] + out[-1][1] == self.fresh:
                out[-1] = (out[-1][0], out[-1][1] + left)
            else:
                out.append((self.fresh, left))
            self.fresh += left
        return out

    def give_runs(self, runs: list[Run]) -> None:
        for run in runs:
            heapq.heappush(self.heap, run)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 1000)),
                max_size=80))
def test_lowest_hands_out_what_the_heap_handed_out(steps) -> None:
    ids, ref = PageIds(200, "lowest"), _HeapLowest(200)
    held: list[list[Run]] = []
    for take, n, i in steps:
        if take or not held:
            if n > ids.free:
                continue
            got = ids.take_runs(n)
            assert got == ref.take_runs(n)
            held.append(got)
        else:
            runs = held.pop(i % len(held))
            # the runs as taken, or page by page; maybe reversed
            pieces = [(p, 1) for p in pages_of(runs)] if i % 3 == 0 else list(runs)
            if i % 2:
                pieces.reverse()
            ids.give_runs(pieces)
            ref.give_runs(pieces)
        ids.check()
        assert ids.free == 200 - ref.fresh + sum(k for _, k in ref.heap)


def test_a_give_joins_the_free_runs_on_both_sides() -> None:
    ids = PageIds(16, "lowest")
    assert ids.take_runs(10) == [(0, 10)]
    ids.give_runs([(2, 2), (6, 2)])
    assert (ids._starts, ids._ends) == ([2, 6, 17], [4, 8, 17])  # and the sentinel
    ids.give_runs([(4, 2)])  # between them: one run
    assert (ids._starts, ids._ends) == ([2, 17], [8, 17])
    ids.give_runs([(9, 1), (1, 1)])  # above the mark's neighbour, below the run
    assert (ids._starts, ids._ends) == ([1, 9, 17], [8, 10, 17])
    ids.check()
    assert ids.take_runs(9) == [(1, 7), (9, 2)]  # page 9 joined to the fresh page 10
    ids.check()


def test_runs_at_the_pools_ends_join_no_sentinel() -> None:
    """A run that ends at the capacity, or starts at page 0, is a free run like any
    other (the sentinel past the capacity is never joined, taken or counted)."""
    ids = PageIds(16, "lowest")
    assert ids.take_runs(16) == [(0, 16)] and ids.free == 0
    ids.give_runs([(12, 4), (0, 2)])
    ids.check()
    assert ids.free == 6
    ids.give_runs([(8, 4)])  # joins the run that ends at the capacity
    assert ids.take_runs(10) == [(0, 2), (8, 8)] and ids.free == 0
    ids.check()
