"""Page ids of one pool, accounted rather than materialised.

    0 ........ fresh ........................ capacity
    [ used or freed ]  [ never handed out: a counter, no memory ]

Freed pages wait as runs ``[start, length]``; memory grows with the pages ever handed out
(one byte each), never with ``capacity``, so any size a user can type is cheap.

``order="fifo"``: fresh pages first (lowest first), then freed pages in the order they were
freed (a replay allocator). ``order="lifo"``: the most recently freed pages first, then
fresh pages (a runtime's free list: hot pages are reused). ``order="lowest"``: the lowest
free id first (the torch runtime's heap, and SGLang's paged allocator once it sorts its
free list), so a fragmented pool still hands out the longest runs it can; freed runs
wait sorted by start and coalesced (a freed run joins the free neighbours it touches
when given, so a take reads the lowest runs off the front, each one output run: what
it hands out depends only on which ids are free). ``order="fresh"``: ids are names,
never reused: every take is one run of ids never handed out, a freed page counts as free
and its id retires (a zero-time replay, whose pages are no memory: extents stay one run,
and ids go past ``capacity``; memory grows with the pages ever handed out, a byte each).
:meth:`give` checks every page before it changes anything.

Work is per run, not per page: runs are taken and given whole and marked with slice
assignments, so freeing a 10,000-page extent costs what its few runs cost (a page list is
cut into runs first). A run is ``(start, length)``.
"""

from __future__ import annotations

import bisect
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Literal

Run = tuple[int, int]

# the marks a run's slice of the used map is set to, as a bytearray repeated: a bytearray
# is stored in a bytearray slice as it is, where bytes would be copied into a temporary
# bytearray first (CPython's bytearray_ass_subscript); the same bytes either way
_ZERO, _ONE = bytearray(1), bytearray(b"\x01")


def runs_of(pages: Iterable[int]) -> list[Run]:
    """Page ids in order -> ascending runs ``(start, length)`` listing them in that order.
    A list that is one ascending run (an allocation handed back whole, the usual case)
    is found with C-level comparisons, not the loop."""
    if isinstance(pages, list):
        n = len(pages)
        if n and pages[-1] - pages[0] == n - 1 and pages == list(range(pages[0],
                                                                      pages[0] + n)):
            return [(pages[0], n)]
    out: list[Run] = []
    start = prev = -2
    n = 0
    for p in pages:
        if p == prev + 1 and n:
            n += 1
        else:
            if n:
                out.append((start, n))
            start, n = p, 1
        prev = p
    if n:
        out.append((start, n))
    return out


def pages_of(runs: Iterable[Run]) -> list[int]:
    """The page ids of ``runs``, in order (the inverse of :func:`runs_of`)."""
    pages: list[int] = []
    for s, n in runs:
        pages.extend(range(s, s + n))
    return pages


def merged(runs: Iterable[Run]) -> list[Run]:
    """``runs`` with each run that continues the one before it joined to it."""
    out: list[Run] = []
    for s, n in runs:
        if out and out[-1][0] + out[-1][1] == s:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((s, n))
    return out


def runs_minus(runs: Iterable[Run], remove: Iterable[Run]) -> list[Run]:
    """The pages of ``runs``, in their order, less those of ``remove`` (any order, may
    overlap), as :func:`merged` runs: ``runs_of(p for p in pages(runs) if p not in
    pages(remove))`` at a cost per run, not per page."""
    spans: list[list[int]] = []  # the union of ``remove``: [start, end) ascending
    for s, n in sorted(remove):
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], s + n)
        elif n:
            spans.append([s, s + n])
    starts = [a for a, _ in spans]
    out: list[Run] = []
    for s, n in runs:
        pos, end = s, s + n
        i = max(bisect.bisect_right(starts, s) - 1, 0)
        while pos < end:
            while i < len(spans) and spans[i][1] <= pos:
                i += 1
            if i == len(spans) or spans[i][0] >= end:
                out.append((pos, end - pos))
                break
            if spans[i][0] > pos:
                out.append((pos, spans[i][0] - pos))
            pos = spans[i][1]
    return merged(out)


class PageIds:
    def __init__(self, capacity: int,
                 order: Literal["fifo", "lifo", "lowest", "fresh"]) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an integer >= 0, got {capacity!r}")
        self.capacity, self.order = capacity, order
        self._fresh = 0  # pages 0.._fresh-1 were handed out at least once
        self._runs: deque[list[int]] = deque()  # freed runs [start, length] (fifo, lifo)
        # order "lowest": the freed runs' starts, ascending, and their ends (exclusive);
        # coalesced (a run never ends where the next starts). Both end with a sentinel
        # run [capacity + 1, capacity + 1), past every id and every end: a start is
        # always found before it, no run joins it, and the run before the first one
        # (index -1) is the sentinel, which no run continues.
        self._starts: list[int] = [capacity + 1]
        self._ends: list[int] = [capacity + 1]
        self._n_runs = 0  # pages in _runs or _starts (fresh: freed pages, ids retired)
        self._used = bytearray()  # of pages below _fresh: 1 = handed out
        # free ids: capacity - _fresh + _n_runs, kept by take_runs and give_runs (an
        # attribute: an allocation reads it, a property would be a call each time)
        self.free = capacity

    def is_used(self, page: int) -> bool:
        return 0 <= page < self._fresh and bool(self._used[page])

    def take(self, n: int) -> list[int]:
        """``n`` free page ids (the caller checked ``n <= free``)."""
        return pages_of(self.take_runs(n))

    def take_runs(self, n: int) -> list[Run]:
        """``n`` free page ids as runs, in hand-out order, coalesced: no run continues the
        one before it (the caller checked ``n <= free``). Freed runs never do (``lowest``
        keeps them coalesced; a stack or queue joins a run given next to the one it would
        be taken after), and fresh ids join a freed run that ends at them."""
        out: list[Run] = []
        left = n
        if self.order == "lowest":  # freed runs by start (coalesced, marked), then fresh
            left -= self._take_lowest(out, left)
            if left > 0:
                start = self._fresh
                k = self._take_fresh(out, left)
                if k:
                    self._used[start:start + k] = _ONE * k
            self.free = self.capacity - self._fresh + self._n_runs
            return out
        if self.order == "fresh":  # new names for all n pages, one run
            self._grow(n, out)
            left = 0
        elif self.order == "fifo":
            left -= self._take_fresh(out, left)
        runs = self._runs
        while runs and left > 0:
            run = runs[0] if self.order == "fifo" else runs[-1]
            k = min(run[1], left)
            out.append((run[0], k))
            run[0] += k
            run[1] -= k
            self._n_runs -= k
            left -= k
            if not run[1]:
                runs.popleft() if self.order == "fifo" else runs.pop()
        if left > 0:
            self._take_fresh(out, left)
        used = self._used
        for s, k in out:
            used[s:s + k] = _ONE * k
        self.free = self.capacity - self._fresh + self._n_runs
        return out

    def _take_lowest(self, out: list[Run], n: int) -> int:
        """The lowest ``n`` freed pages (or all of them), ascending, marked used; every
        freed page is below ``_fresh``, so they come before any fresh page. The freed
        runs are coalesced, so each one taken is one run of ``out`` (the last one maybe
        cut)."""
        starts, ends, used = self._starts, self._ends, self._used
        left, i, m = n, 0, len(starts) - 1  # (the sentinel is not free)
        while i < m and left:
            s = starts[i]
            k = ends[i] - s
            if k > left:  # the last run taken: its front part
                out.append((s, left))
                used[s:s + left] = _ONE * left
                starts[i] = s + left
                left = 0
                break
            out.append((s, k))
            if k == 1:
                used[s] = 1
            else:
                used[s:s + k] = _ONE * k
            left -= k
            i += 1
        if i:
            del starts[:i], ends[:i]
        self._n_runs -= n - left
        return n - left

    def _take_fresh(self, out: list[Run], n: int) -> int:
        k = min(n, self.capacity - self._fresh)
        if k <= 0:
            return 0
        self._grow(k, out)
        return k

    def _grow(self, k: int, out: list[Run]) -> None:
        """Hand out the ``k`` ids from ``_fresh`` on as one run (marked by the caller),
        joined to the last run of ``out`` when that ends where they start."""
        last = out[-1] if out else None
        if last is not None and last[0] + last[1] == self._fresh:
            out[-1] = (last[0], last[1] + k)
        else:
            out.append((self._fresh, k))
        self._fresh += k
        if len(self._used) < self._fresh:  # grow geometrically, up to what is used
            self._used.extend(bytes(max(self._fresh - len(self._used), len(self._used))))

    def unused_in(self, start: int, n: int) -> int | None:
        """The first page of ``start .. start + n - 1`` not handed out, else None."""
        if start < 0:
            return start
        end, fresh = start + n, self._fresh
        if start < fresh:
            i = self._used.find(0, start, min(end, fresh))
            if i >= 0:
                return i
        return None if end <= fresh else max(start, fresh)

    def bad_runs(self, runs: Sequence[Run]) -> int | None:
        """A page of ``runs`` that is not handed out, or listed twice, else None."""
        used, fresh = self._used, self._fresh
        find = used.find
        for s, n in runs:
            if 0 <= s and s + n <= fresh:  # handed-out ids: :meth:`unused_in`, in line
                if n == 1:  # fragmented extents: many one-page runs
                    if not used[s]:
                        return s
                else:
                    i = find(0, s, s + n)
                    if i >= 0:
                        return i
                continue
            p = self.unused_in(s, n)  # a negative start, or a run reaching past the mark
            if p is not None:
                return p
        if len(runs) > 1:
            for (s0, n0), (s1, _) in pairwise(sorted(runs)):
                if s1 < s0 + n0:
                    return s1
        return None

    def bad(self, pages: Sequence[int]) -> int | None:
        """A page of ``pages`` that is not handed out (or repeats), else None."""
        return self.bad_runs(runs_of(pages))

    def give(self, pages: Sequence[int]) -> None:
        """Return ``pages`` (all checked first: see :meth:`bad`)."""
        self.give_runs(runs_of(pages))

    def give_runs(self, runs: Sequence[Run], *, checked: bool = False) -> None:
        """Return the pages of ``runs``, in their order (all checked first; ``checked``:
        the caller's own :meth:`bad_runs` just found nothing, for its own message)."""
        p = None if checked else self.bad_runs(runs)
        if p is not None:
            raise ValueError(f"page {p} is not handed out")
        used, stack = self._used, self._runs
        total = 0
        if self.order == "lowest":  # one pass: unmark each run and join it in, in order
            starts, ends = self._starts, self._ends
            for s, n in runs:
                if n == 1:
                    used[s] = 0
                elif n:
                    used[s:s + n] = _ZERO * n
                else:
                    continue  # no page
                total += n
                i = bisect_left(starts, s)  # at most the sentinel's index
                e = s + n
                if ends[i - 1] == s:  # joins the run below (index -1: the sentinel)
                    if starts[i] == e:  # and the one above
                        ends[i - 1] = ends[i]
                        del starts[i], ends[i]
                    else:
                        ends[i - 1] = e
                elif starts[i] == e:  # joins the run above
                    starts[i] = s
                else:
                    starts.insert(i, s)
                    ends.insert(i, e)
            self._n_runs += total
            self.free += total
            return
        for s, n in runs:
            if n == 1:
                used[s] = 0
            else:
                used[s:s + n] = _ZERO * n
            total += n
        if self.order == "fresh":
            pass  # retired, counted free, never handed out again
        elif self.order == "fifo":
            for s, n in runs:
                last = stack[-1] if stack else None
                if last is not None and last[0] + last[1] == s:
                    last[1] += n
                else:
                    stack.append([s, n])
        else:
            for s, n in reversed(runs):  # the first page given ends on top
                top = stack[-1] if stack else None
                if top is not None and top[0] == s + n:
                    top[0] = s
                    top[1] += n
                else:
                    stack.append([s, n])
        self._n_runs += total
        self.free += total

    def give_checked(self, runs: Sequence[Run]) -> bool:
        """:meth:`give_runs` of runs no one checked (``order="lowest"``), each checked as
        it is given: a run of a page at least whose pages are all handed out and not given
        earlier in this call (those are unmarked by then: listing a page twice shows as a
        page not handed out), as :meth:`bad_runs` asks, run for run. At the first run that
        is not, the runs given before it are taken back and False is returned: the freed
        runs are sorted and coalesced (one form per set of free ids), so the pool is then
        as it was. Else True. One pass over the runs instead of a check and a give."""
        used, fresh, find = self._used, self._fresh, self._used.find
        starts, ends = self._starts, self._ends
        total = 0
        for j, (s, n) in enumerate(runs):
            e = s + n
            if n == 1:
                if s < 0 or s >= fresh or not used[s]:
                    self._take_given(runs[:j])
                    return False
                used[s] = 0
            elif n > 1 and s >= 0 and e <= fresh and find(0, s, e) < 0:
                used[s:e] = _ZERO * n
            else:  # a page not handed out or given twice, or a run of no page
                self._take_given(runs[:j])
                return False
            total += n
            # give_runs' join, written out again: a shared function costs a call per run
            # (measured: +27M instructions on 3,000 trace requests, +151M on the full trace)
            i = bisect_left(starts, s)
            if ends[i - 1] == s:
                if starts[i] == e:
                    ends[i - 1] = ends[i]
                    del starts[i], ends[i]
                else:
                    ends[i - 1] = e
            elif starts[i] == e:
                starts[i] = s
            else:
                starts.insert(i, s)
                ends.insert(i, e)
        self._n_runs += total
        self.free += total
        return True

    def take_given(self, runs: Sequence[Run]) -> None:
        """Undo a :meth:`give_checked` that returned True for ``runs`` (``order="lowest"``):
        the pool is as it was before it (its freed runs' one form)."""
        self._take_given(runs)
        total = sum([n for _, n in runs])
        self._n_runs -= total
        self.free -= total

    def _take_given(self, runs: Sequence[Run]) -> None:
        """Take the runs of ``runs`` (each free, pages at least one, pairwise disjoint: just
        given) out of the freed runs and mark them used; the counts are the caller's."""
        starts, ends, used = self._starts, self._ends, self._used
        for s, n in runs:
            e = s + n
            i = bisect.bisect_right(starts, s) - 1  # the freed run holding s .. e - 1
            a, b = starts[i], ends[i]
            if a == s:
                if b == e:
                    del starts[i], ends[i]
                else:
                    starts[i] = e
            elif b == e:
                ends[i] = s
            else:
                ends[i] = s
                starts.insert(i + 1, e)
                ends.insert(i + 1, b)
            used[s:e] = _ONE * n

    def check(self) -> None:
        """Raise AssertionError when the free runs and the used map disagree: a freed page
        still marked used, a page free twice or beyond the fresh mark, or counts that do
        not add up (O(pages ever handed out): for tests and soak runs)."""
        free: set[int] = set()
        if self._starts[-1] != self.capacity + 1 or self._ends[-1] != self.capacity + 1:
            raise AssertionError("the free runs' sentinel is gone")
        bounds = list(zip(self._starts[:-1], self._ends[:-1], strict=True))
        for (s0, e0), (s1, _) in pairwise(bounds):
            if s1 <= e0:
                raise AssertionError(f"free runs at pages {s0} and {s1} are not sorted, "
                                     "apart and coalesced")
        lowest = [(s, e - s) for s, e in bounds]
        for start, length in [*self._runs, *lowest]:
            if length <= 0:
                raise AssertionError(f"an empty free run at page {start}")
            for p in range(start, start + length):
                if p >= self._fresh or self._used[p] or p in free:
                    raise AssertionError(f"page {p} is free but also used, repeated or "
                                         f"never handed out")
                free.add(p)
        used = sum(self._used[:self._fresh])
        if self.free != self.capacity - self._fresh + self._n_runs:
            raise AssertionError(f"free count {self.free} != {self.capacity} - "
                                 f"{self._fresh} handed out + {self._n_runs} freed")
        listed = self._n_runs if self.order == "fresh" else len(free)  # fresh lists none
        if listed != self._n_runs or used + self._n_runs != self._fresh:
            raise AssertionError(f"{used} used + {self._n_runs} free != {self._fresh} handed out "
                                 f"({len(free)} in the runs)")
