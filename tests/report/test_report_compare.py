"""Comparison tables: variants x metrics, undefined values shown as '-'."""

import math

import pytest

from hicache.report.compare import comparison_table, format_table

SUMMARIES = {
    "l1": {"hit_rate": 0.25, "ttft_p99_s": 1.5, "h2d_gbps": None},
    "l1+l2+l3": {"hit_rate": 0.975, "ttft_p99_s": 0.125, "h2d_gbps": 41.0},
}


def test_table_has_one_row_per_variant_and_nan_for_undefined():
    df = comparison_table(SUMMARIES, ["ttft_p99_s", "hit_rate", "h2d_gbps"])
    assert list(df.index) == ["l1", "l1+l2+l3"]
    assert list(df.columns) == ["ttft_p99_s", "hit_rate", "h2d_gbps"]
    assert df.loc["l1+l2+l3", "hit_rate"] == 0.975 and math.isnan(df.loc["l1", "h2d_gbps"])


def test_unknown_metric_is_an_error():
    with pytest.raises(KeyError, match="ttft_p999"):
        comparison_table(SUMMARIES, ["ttft_p999"])


def test_format_table_aligns_columns_and_shows_units():
    text = format_table(comparison_table(SUMMARIES, ["hit_rate", "h2d_gbps"]))
    lines = text.splitlines()
    assert lines[0].split() == ["variant", "hit_rate", "[fraction]", "h2d_gbps", "[GB/s]"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["l1", "0.25", "-"]
    assert lines[3].split() == ["l1+l2+l3", "0.975", "41"]
    assert len({len(line) for line in lines}) == 1  # right-aligned last column
    assert format_table(comparison_table({}, ["hit_rate"])).splitlines()[0].startswith("variant")
