"""A timeline's two views, tuples and TimelineRow values, hold the same rows in order,
however reads and records interleave, and across a pickle (a process boundary)."""

from __future__ import annotations

import pickle

import pytest

from hicache.timeline import COLUMNS, Timeline, TimelineRow


def test_rows_and_tuples_agree_while_rows_arrive() -> None:
    tl = Timeline()
    tl.record("h2d", "load", 0.0, 1.0, batch=3, layer=2, nbytes=4096.0)
    rows = tl.rows
    assert rows == [TimelineRow("h2d", "load", 3, -1, 2, 0.0, 1.0, 4096, 1)]
    tl.record("compute", "decode", 1.0, 2.5, batch=4, steps=3)
    assert len(tl) == 2
    assert tl.rows is rows and len(rows) == 2  # one list, extended in place
    assert [tuple(getattr(r, c) for c in COLUMNS) for r in tl.rows] == tl.as_tuples()
    assert tl.as_tuples()[1] == ("compute", "decode", 4, -1, -1, 1.0, 2.5, 0, 3)
    assert isinstance(tl.as_tuples()[0][7], int)  # bytes are stored as int


def test_rows_recorded_at_once_are_those_recorded_one_by_one() -> None:
    one, many = Timeline(), Timeline()
    for tl in (one, many):
        tl.record("cpu", "step", 0.0, 0.5)
    assert len(many.rows) == 1  # a read before the rows arrive
    one.record("compute", "prefill", 0.5, 1.0, batch=2, layer=0)
    one.record("h2d", "load", 0.25, 1.5, batch=2, layer=1, nbytes=64)
    many.record_rows([("compute", "prefill", 2, -1, 0, 0.5, 1.0, 0, 1),
                      ("h2d", "load", 2, -1, 1, 0.25, 1.5, 64, 1)])
    assert many.as_tuples() == one.as_tuples()
    assert many.rows == one.rows and len(many) == 3


def test_a_row_that_ends_before_it_starts_is_refused() -> None:
    tl = Timeline()
    with pytest.raises(ValueError, match="ends"):
        tl.record("cpu", "step", 2.0, 1.0)
    assert len(tl) == 0 and tl.rows == []


def test_a_pickled_timeline_keeps_its_rows() -> None:
    tl = Timeline()
    assert not tl  # empty: falsy (ipc's server stands an empty one in)
    tl.record("l3", "query", 0.5, 0.75)
    _ = tl.rows
    back = pickle.loads(pickle.dumps(tl))
    assert back.as_tuples() == tl.as_tuples() and back.rows == tl.rows
    back.record("l3", "prefetch", 1.0, 2.0, nbytes=8)
    assert len(back) == 2 and len(tl) == 1
