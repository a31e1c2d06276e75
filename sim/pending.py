"""L2 pages that wait for the backup copying into them, by backup, as page runs.

Invariant: each page belongs to at most one backup's entry, the one placed last that
holds it (a later backup given a page takes it over); an entry lists only pages it
still holds, and none is empty; ``_marks[p]`` is 1 exactly for the pages some entry
holds. That is the page -> event map the runtime kept before (one dict item per page),
held per backup as its allocation's runs: placing a backup, readying it and asking what
a store waits for cost per run and per backup in flight (a few), not per page; a
placement whose pages no entry holds (the marks say so, per run: a backup's pages are
taken over only when L2 pages freed while their backup copied are handed out again)
looks at no entry.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter

import simpy

from hicache.runtime.page_ids import Run, pages_of, runs_minus

_FIRST = itemgetter(0)
_ZERO, _ONE = bytearray(1), bytearray(b"\x01")  # a run's marks: repeated (page_ids)


def first_hit(runs: list[Run], held: list[Run]) -> int | None:
    """The position, in the page order of ``runs``, of its first page that ``held``
    (pairwise disjoint runs) holds; None when they share no page."""
    if runs == held and runs:  # the usual: a backup's own pages
        return 0
    ordered = sorted(held)
    return _first_hit_in(runs, ordered, [s for s, _ in ordered])


def _first_hit_in(runs: list[Run], ordered: list[Run], starts: list[int]) -> int | None:
    """:func:`first_hit` of ``held`` sorted (``ordered``) and its starts (``starts``):
    sorted once for every ``runs`` it is asked about."""
    last = len(ordered) - 1
    pos = 0  # pages of ``runs`` before this run
    for s, n in runs:
        i = bisect_right(starts, s) - 1  # the held run starting at or before s
        if i >= 0 and ordered[i][0] + ordered[i][1] > s:
            return pos
        if i < last and starts[i + 1] < s + n:  # the next held run starts inside this one
            return pos + starts[i + 1] - s
        pos += n
    return None


class PendingPages:
    """One pool's L2 pages waiting for their backups (module doc)."""

    __slots__ = ("_by", "_marks")

    def __init__(self) -> None:
        self._by: dict[simpy.Event, list[Run]] = {}  # backup's event -> runs it holds
        self._marks = bytearray()  # page -> 1 while an entry holds it (grown on demand)

    def __len__(self) -> int:
        return len(self._by)

    def add(self, runs: list[Run], done: simpy.Event) -> None:
        """``runs`` (disjoint) wait for ``done`` now, taken from any entry that held them."""
        if not runs:
            return
        by, marks = self._by, self._marks
        end = max([s + n for s, n in runs])
        if end > len(marks):
            marks.extend(bytes(max(end - len(marks), len(marks))))
        find = marks.find
        if by and any([find(1, s, s + n) >= 0 for s, n in runs]):  # some entry holds one
            ordered = sorted(runs)  # sorted once for every entry asked
            starts = [s for s, _ in ordered]
            for ev, held in list(by.items()):
                if _first_hit_in(held, ordered, starts) is not None:
                    rest = runs_minus(held, runs)
                    if rest:
                        by[ev] = rest
                    else:
                        del by[ev]
        for s, n in runs:
            marks[s:s + n] = _ONE * n
        old = by.get(done)
        by[done] = [*old, *runs] if old else list(runs)

    def ready(self, runs: list[Run], done: simpy.Event) -> None:
        """``done`` fired: the pages of ``runs`` that still wait for it wait no more."""
        held = self._by.get(done)
        if held is None:
            return
        rest = [] if held == runs else runs_minus(held, runs)
        marks = self._marks
        for s, n in runs_minus(held, rest) if rest else held:  # the pages it lets go
            marks[s:s + n] = _ZERO * n
        if rest:
            self._by[done] = rest
        else:
            del self._by[done]

    def events(self, runs: list[Run]) -> list[simpy.Event]:
        """The unfired events the pages of ``runs`` wait for, each once, in the order of
        the first page of ``runs`` that waits for it."""
        find = self._marks.find
        if not any([find(1, s, s + n) >= 0 for s, n in runs]):
            return []  # no entry holds a page of them (the usual: their backup is done)
        hits = []
        for ev, held in self._by.items():
            pos = first_hit(runs, held)
            if pos is not None:
                hits.append((pos, ev))
        if len(hits) > 1:
            hits.sort(key=_FIRST)  # positions differ: entries share no page
        return [ev for _, ev in hits if not ev.processed]

    def pages(self) -> dict[int, simpy.Event]:
        """Page -> the event it waits for (listed on demand: tests)."""
        return {p: ev for ev, held in self._by.items() for p in pages_of(held)}
