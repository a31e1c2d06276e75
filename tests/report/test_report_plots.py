"""Plots write non-empty PNGs, also for empty inputs; the Gantt window finds the busy part."""

import numpy as np
import pandas as pd
import pytest

from hicache.report.frames import requests_frame, timeline_frame
from hicache.report.plots import (
    plot_gantt,
    plot_hit_rate_by_round,
    plot_overlay,
    plot_ttft_cdf,
    plot_variant_bars,
)
from hicache.report.window import busiest_window

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == PNG


def _timeline(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Compute rows all along [0, 10] s; H2D loads only inside [6.0, 6.05] s."""
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0, 10, n))
    rows = [("compute", "decode", i, -1, 0, s, s + 0.004, 0) for i, s in enumerate(starts)]
    rows += [("h2d", "load", -1, -1, k % 32, 6.0 + k * 0.001, 6.0 + k * 0.001 + 0.0008, 1 << 20)
             for k in range(50)]  # fmt: skip
    rows += [("cpu", "schedule", -1, -1, -1, s, s + 0.0001, 0) for s in starts[::10]]
    return timeline_frame(rows)


def _requests(shift: float) -> pd.DataFrame:
    return requests_frame(
        [
            dict(
                rid=i,
                round=i % 4,
                prompt_tokens=100 + i,
                output_tokens=8,
                device_hit=(i % 4) * 20,
                arrival=0.1 * i,
                first_token=0.1 * i + shift * (1 + i % 7),
            )
            for i in range(40)
        ]
    )


def test_busiest_window_lands_on_h2d_overlapping_compute_and_bounds_rows():
    tl = _timeline()
    a, b = busiest_window(tl, max_rows=200)
    assert a < 6.0 and 6.05 < b  # all H2D-overlapping-compute time is inside
    assert abs((a + b) / 2 - 6.025) < 0.01  # centred on it
    assert b - a < 1.0
    assert ((tl["start"] <= b) & (tl["end"] >= a)).sum() <= 200
    small = tl.iloc[:50]
    assert busiest_window(small) == (small["start"].min(), small["end"].max())
    assert busiest_window(timeline_frame([])) is None


def test_all_plots_write_png(tmp_path):
    tl = _timeline()
    reqs = {"l1": _requests(0.05), "l1+l2": _requests(0.02)}
    outs = [
        plot_hit_rate_by_round(reqs, tmp_path / "hit.png"),
        plot_ttft_cdf(reqs, tmp_path / "ttft.png"),
        plot_gantt(tl, tmp_path / "gantt.png"),
        plot_gantt(tl, tmp_path / "gantt_window.png", window=(1.0, 1.05)),
        plot_overlay(tl, tl.assign(start=tl["start"] * 1.1, end=tl["end"] * 1.1),
                     tmp_path / "sub" / "overlay.png", window=(5.9, 6.1)),
        plot_variant_bars({"l1": {"hit_rate": 0.3}, "l3": {"hit_rate": None}}, "hit_rate",
                          tmp_path / "bars.png"),
    ]  # fmt: skip
    for p in outs:
        assert _is_png(p), p


@pytest.mark.parametrize("name", ["hit", "ttft", "gantt", "overlay", "bars"])
def test_empty_inputs_still_write_png(tmp_path, name):
    empty_req, empty_tl = requests_frame([]), timeline_frame([])
    path = tmp_path / f"{name}.png"
    {
        "hit": lambda: plot_hit_rate_by_round({"x": empty_req}, path),
        "ttft": lambda: plot_ttft_cdf({}, path),
        "gantt": lambda: plot_gantt(pd.DataFrame(), path),
        "overlay": lambda: plot_overlay(empty_tl, None, path),
        "bars": lambda: plot_variant_bars({}, "hit_rate", path),
    }[name]()
    assert _is_png(path)
