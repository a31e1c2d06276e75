"""Exact simulated times: SimPy schedules ``now + delay``, and ``now + (at - now)`` is not
always ``at`` in floating point; code that must land on a time computed elsewhere (a
folded decode step, sim.fold) asks :func:`exact_delay` for the delay that does."""

from __future__ import annotations

import math


def exact_delay(now: float, at: float) -> float:
    """A delay ``d >= 0`` with ``now + d == at`` exactly (``at >= now``)."""
    if at < now:
        raise ValueError(f"time {at!r} is before now ({now!r})")
    d = at - now
    while now + d < at:
        d = math.nextafter(d, math.inf)
    while d > 0 and now + d > at:
        d = math.nextafter(d, -math.inf)
    return d
