"""A timeline's two views, tuples and TimelineRow values, hold the same rows in order,
however reads and records interleave, and across a pickle (a process boundary)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


_LANES = st.sampled_from(["compute", "h2d", "pcie:h2d", "l3", "cpu"])
_ROW = st.tuples(_LANES, st.sampled_from(["load", "decode", "query"]),
                 st.integers(-1, 10**6), st.integers(-1, 5), st.integers(-1, 80),
                 st.floats(0, 1e4), st.floats(0, 1e4), st.integers(0, 1 << 40),
                 st.integers(1, 500)).map(lambda r: r[:5] + (min(r[5:7]), max(r[5:7])) + r[7:])
# one step: a row recorded alone, rows recorded at once, or a read of one view
_STEP = st.one_of(st.tuples(st.just("record"), _ROW),
                  st.tuples(st.just("rows"), st.lists(_ROW, max_size=6)),
                  st.tuples(st.sampled_from(["read", "tuples", "pickle"]), st.none()))


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEP, max_size=25))
def test_every_view_is_a_list_of_the_tuples_recorded(steps: list) -> None:
    """Twin of the timeline against a plain list of the tuples recorded (how it kept
    them before keeping their values flat): same rows, same order, same values of the
    same types, whatever the interleaving of records and
    reads, before and after a pickle."""
    tl, ref = Timeline(), []
    for kind, arg in steps:
        if kind == "record":
            lane, op, batch, request, layer, start, end, nbytes, n = arg
            tl.record(lane, op, start, end, batch=batch, request=request, layer=layer,
                      nbytes=nbytes, steps=n)
            ref.append(arg)
        elif kind == "rows":
            tl.record_rows(arg)
            ref.extend(arg)
        elif kind == "read":
            assert tl.rows == [TimelineRow(*t) for t in ref]
        elif kind == "tuples":
            got = tl.as_tuples()
            assert got == ref and [list(map(type, t)) for t in got] == [
                list(map(type, t)) for t in ref]
        else:
            tl = pickle.loads(pickle.dumps(tl))
        assert len(tl) == len(ref) and bool(tl) == bool(ref)
    assert tl.as_tuples() == ref and tl.rows == [TimelineRow(*t) for t in ref]


def test_a_timeline_pickled_as_tuples_loads() -> None:
    """A timeline pickled when it kept one tuple per row (state ``_tuples``) loads with
    its rows."""
    rows = [("l3", "query", -1, -1, -1, 0.5, 0.75, 0, 1),
            ("h2d", "load", 3, -1, 2, 1.0, 2.0, 64, 1)]
    tl = Timeline.__new__(Timeline)
    tl.__setstate__({"_tuples": rows})
    assert tl.as_tuples() == rows and len(tl) == 2 and tl.rows[1].bytes == 64
