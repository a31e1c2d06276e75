"""Timeline and request frames have fixed columns and dtypes, and survive parquet."""

import numpy as np
import pandas as pd
import pytest

from hicache.report.frames import (
    REQUEST_COLUMNS,
    TIMELINE_COLUMNS,
    read_requests_parquet,
    read_timeline_parquet,
    requests_frame,
    timeline_frame,
    write_requests_parquet,
    write_timeline_parquet,
)
from hicache.timeline import COLUMNS, Timeline


def _timeline() -> Timeline:
    t = Timeline()
    t.record("compute", "prefill", 0.0, 0.002, batch=1, layer=0)
    t.record("h2d", "load", 0.001, 0.003, batch=1, layer=1, nbytes=4096)
    return t


def _check_dtypes(df: pd.DataFrame) -> None:
    assert tuple(df.columns) == TIMELINE_COLUMNS == (*COLUMNS, "duration")
    for c in ("batch", "request", "layer", "bytes"):
        assert df[c].dtype == np.int64, c
    for c in ("start", "end", "duration"):
        assert df[c].dtype == np.float64, c
    assert all(isinstance(x, str) for x in df["lane"]) and all(isinstance(x, str) for x in df["op"])


def test_timeline_frame_from_timeline_tuples_dicts_and_empty():
    t = _timeline()
    from_tl = timeline_frame(t)
    _check_dtypes(from_tl)
    assert from_tl["duration"].tolist() == pytest.approx([0.002, 0.002])
    assert from_tl.loc[1, "bytes"] == 4096
    pd.testing.assert_frame_equal(timeline_frame(t.as_tuples()), from_tl)
    pd.testing.assert_frame_equal(timeline_frame(t.rows), from_tl)
    dicts = [dict(zip(COLUMNS, r, strict=True)) for r in t.as_tuples()]
    pd.testing.assert_frame_equal(timeline_frame(dicts), from_tl)
    empty = timeline_frame([])
    _check_dtypes(empty)
    assert len(empty) == 0


def test_timeline_frame_rejects_missing_columns_and_negative_durations():
    with pytest.raises(ValueError, match="missing"):
        timeline_frame(pd.DataFrame({"lane": ["compute"]}))
    bad = [("compute", "x", -1, -1, -1, 2.0, 1.0, 0)]
    with pytest.raises(ValueError, match="before"):
        timeline_frame(bad)


def test_timeline_parquet_round_trip(tmp_path):
    df = timeline_frame(_timeline())
    back = read_timeline_parquet(write_timeline_parquet(df, tmp_path / "tl.parquet"))
    pd.testing.assert_frame_equal(back, df)


def test_requests_frame_fills_derived_columns():
    df = requests_frame([
        dict(rid=1, prompt_tokens=100, output_tokens=4, device_hit=30, host_hit=10, l3_hit=5,
             arrival=1.0, first_token=1.25, finish=2.0, session_id="s1", round=0),
        dict(rid=2, prompt_tokens=50, output_tokens=1, arrival=1.5, extra="dropped"),
    ])  # fmt: skip
    assert tuple(df.columns) == REQUEST_COLUMNS
    assert df["cached_tokens"].tolist() == [45, 0]
    assert df["ttft"].iloc[0] == pytest.approx(0.25) and np.isnan(df["ttft"].iloc[1])
    assert df["session_id"].tolist() == ["s1", None]
    assert df["round"].tolist() == [0, -1] and df["replica"].tolist() == [0, 0]
    assert df["rid"].dtype == np.int64 and df["finish"].dtype == np.float64


def test_requests_frame_rejects_inconsistent_cache_split():
    with pytest.raises(ValueError, match="cached_tokens"):
        requests_frame([dict(rid=7, prompt_tokens=10, output_tokens=1, cached_tokens=9,
                             device_hit=4, host_hit=4)])  # fmt: skip


def test_requests_frame_empty_and_parquet(tmp_path):
    assert tuple(requests_frame([]).columns) == REQUEST_COLUMNS
    df = requests_frame([dict(rid=1, prompt_tokens=3, output_tokens=2, device_hit=1,
                              arrival=0.0, first_token=0.1, finish=0.2, itl_mean=0.1)])  # fmt: skip
    back = read_requests_parquet(write_requests_parquet(df, tmp_path / "r.parquet"))
    pd.testing.assert_frame_equal(back, df)
