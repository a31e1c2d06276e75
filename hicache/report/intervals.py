"""Exact interval algebra on numpy arrays, O(n log n) (sort + searchsorted, no Python loops).

Invariant: :func:`union` returns disjoint, sorted, non-empty intervals whose total length is
the measure of the union of the inputs; every other function builds on that normal form.
Zero-length inputs contribute nothing.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]  # (starts, ends), float64


def union(starts, ends) -> Intervals:
    """Merge intervals into sorted disjoint ones (touching intervals merge)."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # a new merged interval starts where the start lies beyond everything seen so far
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def length(iv: Intervals) -> float:
    """Total length of disjoint intervals."""
    s, e = iv
    return float(np.sum(e - s)) if s.size else 0.0


def covered_before(iv: Intervals, x) -> np.ndarray:
    """Measure of ``iv`` (disjoint, sorted) within (-inf, x], vectorised over ``x``."""
    s, e = iv
    x = np.asarray(x, dtype=np.float64)
    if s.size == 0:
        return np.zeros_like(x)
    cum = np.concatenate(([0.0], np.cumsum(e - s)))  # length of intervals before index i
    i = np.searchsorted(s, x, side="right") - 1  # last interval starting at or before x
    ic = np.clip(i, 0, s.size - 1)
    partial = np.clip(x - s[ic], 0.0, e[ic] - s[ic])
    return np.where(i < 0, 0.0, cum[ic] + partial)


def overlap_each(iv: Intervals, starts, ends) -> np.ndarray:
    """For each query [start, end], the length it shares with disjoint ``iv``."""
    a = np.asarray(starts, dtype=np.float64)
    b = np.maximum(np.asarray(ends, dtype=np.float64), a)
    return covered_before(iv, b) - covered_before(iv, a)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two disjoint sorted sets, as disjoint sorted intervals."""
    if a[0].size == 0 or b[0].size == 0:
        return np.empty(0), np.empty(0)
    # every piece of the intersection starts at a start of a or of b
    pts = np.concatenate((a[0], b[0]))
    ia = np.searchsorted(a[0], pts, side="right") - 1
    ib = np.searchsorted(b[0], pts, side="right") - 1
    ok = (ia >= 0) & (ib >= 0)
    pts, ia, ib = pts[ok], ia[ok], ib[ok]
    ends = np.minimum(a[1][ia], b[1][ib])
    inside = ends > pts  # p lies inside both containing intervals
    return union(pts[inside], ends[inside])
