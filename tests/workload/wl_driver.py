"""A tiny reference driver: runs a Workload against a server of unlimited capacity.

Each request finishes ``service(request)`` seconds after it arrives; finishes are fed
back through ``on_finished`` in time order, as the real scheduler would.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Hashable

from hicache.workload.request import Request, Workload


def varied_service(r: Request) -> float:
    """Deterministic, uneven service times (0.1 s .. 0.7 s) so completions interleave."""
    return 0.1 + (r.rid * 7919 % 13) * 0.05


def drive(wl: Workload, service: Callable[[Request], float] = varied_service
          ) -> list[tuple[Request, float]]:
    """Run ``wl`` to completion; returns (request, finish time) in finish order."""
    heap: list[tuple[float, int, Request]] = []
    for r in wl.start():
        heapq.heappush(heap, (r.arrival + service(r), r.rid, r))
    done = []
    while heap:
        finish, _, r = heapq.heappop(heap)
        done.append((r, finish))
        for f in wl.on_finished(r.rid, finish):
            assert f.arrival >= finish, "follow-up arrives before the finish that caused it"
            heapq.heappush(heap, (f.arrival + service(f), f.rid, f))
    return done


def max_in_flight(records: list[tuple[Request, float]]) -> int:
    """Largest number of requests with arrival <= t < finish, over all t."""
    events = [(r.arrival, 1) for r, _ in records] + [(f, -1) for _, f in records]
    events.sort()  # at equal times the finish (-1) sorts first
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def turns_by(records: list[tuple[Request, float]], key: Callable[[Request], Hashable]
             ) -> dict[Hashable, list[tuple[Request, float]]]:
    """(request, finish) records grouped by ``key(request)``, each group in round order."""
    out: dict[Hashable, list[tuple[Request, float]]] = defaultdict(list)
    for r, f in records:
        out[key(r)].append((r, f))
    for turns in out.values():
        turns.sort(key=lambda x: x[0].round)
    return out
