"""Interval algebra is exact: checked against closed forms and a unit-cell oracle."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hicache.report import intervals as iv


def test_union_merges_overlapping_and_touching_and_drops_empty():
    s, e = iv.union([3, 0, 1, 6, 9], [4, 2, 3, 6, 10])
    assert s.tolist() == [0, 9] and e.tolist() == [4, 10]  # [0,2]+[1,3]+[3,4]; [6,6] dropped
    assert iv.length((s, e)) == 5


def test_overlap_each_and_intersect():
    u = iv.union([0, 5], [2, 6])
    assert iv.overlap_each(u, [1, -1, 2.5, 1], [5.5, 0, 3, 10]).tolist() == [1.5, 0, 0, 2]
    s, e = iv.intersect(u, iv.union([1, 4], [5.5, 7]))
    assert s.tolist() == [1, 5] and e.tolist() == [2, 6]


def test_empty_inputs():
    empty = iv.union([], [])
    assert iv.length(empty) == 0.0
    assert iv.overlap_each(empty, [0.0], [1.0]).tolist() == [0.0]
    assert iv.intersect(empty, iv.union([0], [1]))[0].size == 0


cells = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 8)), max_size=25)


def _covered(pairs):
    return {c for a, w in pairs for c in range(a, a + w)}


@given(cells, cells)
def test_matches_unit_cell_oracle(a_pairs, b_pairs):
    a = iv.union([p for p, _ in a_pairs], [p + w for p, w in a_pairs])
    b = iv.union([p for p, _ in b_pairs], [p + w for p, w in b_pairs])
    ca, cb = _covered(a_pairs), _covered(b_pairs)
    assert iv.length(a) == len(ca)
    assert iv.length(iv.intersect(a, b)) == len(ca & cb)
    each = iv.overlap_each(a, [p for p, _ in b_pairs], [p + w for p, w in b_pairs])
    expect = [len(ca & set(range(p, p + w))) for p, w in b_pairs]
    assert np.array_equal(each, np.array(expect, dtype=float))
