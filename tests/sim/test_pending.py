"""``sim.pending.PendingPages`` (L2 pages waiting for their backups, as runs per backup)
against the page -> event map the runtime kept before (one dict item per page): random
placements (a later backup taking pages over), readies of any extent, and the events a
store waits for, some fired, in the same order."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as hs

from hicache.runtime.page_ids import runs_of
from sim.pending import PendingPages, first_hit


class _PerPage:
    """The runtime's former map: page -> the event of the backup placed last on it."""

    def __init__(self) -> None:
        self.map: dict[int, simpy.Event] = {}

    def add(self, pages: list[int], done: simpy.Event) -> None:
        self.map.update(dict.fromkeys(pages, done))

    def ready(self, pages: list[int], done: simpy.Event) -> None:
        for p in pages:
            if self.map.get(p) is done:
                del self.map[p]

    def events(self, pages: list[int]) -> list[simpy.Event]:
        events = dict.fromkeys(map(self.map.get, pages))
        return [e for e in events if e is not None and not e.processed]


pages = hs.lists(hs.integers(0, 30), max_size=12, unique=True)  # any order: any runs
op = hs.tuples(hs.sampled_from(["add", "ready", "events", "fire"]), hs.integers(0, 3), pages)


@settings(max_examples=400, deadline=None)
@given(ops=hs.lists(op, max_size=25))
def test_pending_pages_match_the_per_page_map(ops):
    env = simpy.Environment()
    events = [env.event() for _ in range(4)]
    ref, got = _PerPage(), PendingPages()
    for kind, i, ps in ops:
        runs = runs_of(ps)
        if kind == "add":
            ref.add(ps, events[i])
            got.add(runs, events[i])
        elif kind == "ready":
            ref.ready(ps, events[i])
            got.ready(runs, events[i])
        elif kind == "events":
            assert got.events(runs) == ref.events(ps)
        elif not events[i].triggered:
            events[i].succeed()
            env.run()  # processed: a store no longer waits for it
        assert got.pages() == ref.map
        assert bool(got) == bool(ref.map)
        # the marks are the pages some entry holds (an add asks its entries only then)
        assert {p for p, m in enumerate(got._marks) if m} == set(ref.map)


@given(a=pages, b=pages)
def test_first_hit_is_the_first_shared_page(a, b):
    hit = next((k for k, p in enumerate(a) if p in set(b)), None)
    assert first_hit(runs_of(a), runs_of(b)) == hit
