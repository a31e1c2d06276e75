"""Pick a readable time window of a timeline: where H2D copies overlap compute the most.

Invariant: the returned window lies inside the timeline's span and overlaps at most
``max_rows`` rows unless a single instant already holds more (then the narrowest tried
window is returned). Selection is O(n log n) per tried width, with at most ~40 widths.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hicache.report import intervals as iv


def _score_intervals(tl: pd.DataFrame) -> iv.Intervals:
    """H2D ∩ compute; falling back to H2D, then compute, then all rows when that is empty."""
    h2d = tl[tl["lane"] == "h2d"]
    comp = tl[tl["lane"] == "compute"]
    hu = iv.union(h2d["start"], h2d["end"])
    cu = iv.union(comp["start"], comp["end"])
    for cand in (iv.intersect(hu, cu), hu, cu):
        if cand[0].size:
            return cand
    return iv.union(tl["start"], tl["end"])


def _best_start(score: iv.Intervals, width: float, lo: float, hi: float) -> float:
    """Start in [lo, hi - width] maximising the measure of ``score`` inside the window."""
    if score[0].size == 0:
        return lo
    cand = np.concatenate((score[0], score[1] - width, [lo]))
    cand = np.clip(cand, lo, max(lo, hi - width))
    gain = iv.covered_before(score, cand + width) - iv.covered_before(score, cand)
    a = float(cand[int(np.argmax(gain))])
    # centre the covered part [first, last] in the window; it still fits, so no gain is lost
    s, e = score
    hit = (s < a + width) & (e > a)
    if hit.any():
        first, last = max(a, float(s[hit].min())), min(a + width, float(e[hit].max()))
        a = min(max((first + last - width) / 2, lo), max(lo, hi - width))
    return a


def _rows_in(tl: pd.DataFrame, a: float, b: float) -> int:
    return int(((tl["start"] <= b) & (tl["end"] >= a)).sum())


def busiest_window(
    tl: pd.DataFrame, *, max_rows: int = 400, min_fraction: float = 0.005
) -> tuple[float, float] | None:
    """(start, end) seconds of the window to draw; ``None`` for an empty timeline.

    The whole span when it holds at most ``max_rows`` rows. Otherwise the width starts at
    ``span * max(min_fraction, max_rows / n_rows)`` and halves until the window (placed to
    maximise H2D-overlapping-compute time inside it) holds at most ``max_rows`` rows.
    """
    if len(tl) == 0:
        return None
    lo, hi = float(tl["start"].min()), float(tl["end"].max())
    span = hi - lo
    if len(tl) <= max_rows or span <= 0:
        return lo, hi
    score = _score_intervals(tl)
    width = span * min(1.0, max(min_fraction, max_rows / len(tl)))
    best = lo, lo + width
    for _ in range(40):
        a = _best_start(score, width, lo, hi)
        best = a, a + width
        if _rows_in(tl, *best) <= max_rows:
            break
        width /= 2
    return best
