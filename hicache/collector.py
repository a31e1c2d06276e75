"""CPython's cyclic garbage collector during a long run (a simulation, a trace replay).

A long run allocates millions of short-lived objects (events, plans, slices, tuples),
which refcounting frees, while its long-lived state grows (the L3 key index, tree nodes,
records, decisions). A young collection scans every tracked object born since the last
one and still alive, so the run's growth is scanned whatever the threshold, and none of
those collections found garbage (full trace L1+L2+L3: ten collections, 0.5 s; the 87
fingerprint runs: none). So for the run's duration :func:`run_collector` collects the
young generation only after 1,000,000 net allocations (the full trace, 12,031 requests,
allocates fewer) and the older ones rarely; at the end it moves what the run made to the
oldest generation without scanning it (:func:`promote_unscanned`: with the previous
thresholds back, the next young collection would otherwise collect the middle
generation, the whole run's growth: 0.3 s of the full trace). The previous thresholds
come back afterwards, also when the run raises.

CPython starts a full collection when what its collections promoted to the oldest
generation since the last full one exceeds a quarter of what that one kept; it does not
count what a freeze moves there. So :func:`promote_unscanned` applies the same rule to
what the runs promoted: once earlier runs' objects (the garbage of their dropped results:
SimPy processes and the tree hold cycles) exceed a quarter of the heap (and
:data:`CHECK_FROM`), the run's end collects fully first. A single run never collects;
back-to-back runs in one process (``sim run``'s variants) hold the garbage of two or
three earlier runs at most (3,000 trace requests, three variants twice over: peak RSS
216 MB, 400 MB before; the collector's CPU, a last full collection included, the same).

Invariant: no result changes. The collector frees only objects nothing can reach, and no
code of the run depends on when that happens (no finalizers, no weak references).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

RUN_THRESHOLDS = (1_000_000, 20, 20)


@contextmanager
def run_collector(thresholds: tuple[int, int, int] = RUN_THRESHOLDS) -> Iterator[None]:
    """Collect with ``thresholds`` inside the block, promote what it made unscanned at its
    end (:func:`promote_unscanned`); restore the previous thresholds after."""
    before = gc.get_threshold()
    young = gc.get_stats()[0]["collections"]
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        young = gc.get_stats()[0]["collections"] - young  # each: a threshold's growth
        promote_unscanned(gc.get_count()[0] + young * thresholds[0])
        gc.set_threshold(*before)


# below this many objects promoted unscanned, the heap is not even counted (a walk of
# it: 40 ms a million objects; tests run thousands of small simulations)
CHECK_FROM = 100_000


class _Promoted:
    """What runs promoted unscanned since the last full collection (``objects``: net
    tracked objects); ``heap``: the heap's size when last counted, 0 if not since then;
    ``full``: CPython's count of full collections when this was last brought up to date."""

    objects = 0
    heap = 0
    full = -1


def promote_unscanned(grown: int) -> None:
    """Move every tracked object to the oldest generation without scanning it (freeze,
    then unfreeze); first collect fully if what earlier runs promoted so (``grown`` is
    what this one made) exceeds a quarter of the heap. Skipped when the caller has frozen
    objects: unfreezing would release them too."""
    if gc.get_freeze_count():
        return
    p = _Promoted
    if gc.get_stats()[2]["collections"] != p.full:  # it scanned what runs promoted
        p.objects = p.heap = 0
    if p.objects > max(CHECK_FROM, p.heap // 4):
        p.heap = _heap()
        if p.objects > p.heap // 4:
            gc.collect()
            p.objects, p.heap = 0, _heap()
    gc.freeze()
    gc.unfreeze()
    p.objects += grown
    p.full = gc.get_stats()[2]["collections"]


def _heap() -> int:
    """How many objects the collector tracks (a walk of every generation)."""
    gc.freeze()
    n = gc.get_freeze_count()
    gc.unfreeze()
    return n
