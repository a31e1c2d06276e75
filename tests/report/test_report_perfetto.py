"""Chrome trace export: valid JSON, one thread per lane in a stable order, microseconds."""

import gzip
import json

import pytest

from hicache.report.frames import timeline_frame
from hicache.report.perfetto import chrome_trace, lane_order, write_chrome_trace

ROWS = [  # lane, op, batch, request, layer, start (s), end (s), bytes
    ("cpu", "schedule", 3, -1, -1, 0.0, 0.0002, 0),
    ("h2d", "load", 3, -1, 4, 0.0015, 0.0025, 8 << 20),
    ("compute", "prefill", 3, -1, 4, 0.002, 0.0031, 0),
    ("pcie:h2d", "load", 3, -1, 4, 0.0015, 0.0025, 8 << 20),
    ("ce:h2d", "load", 3, -1, 4, 0.0015, 0.0025, 8 << 20),
    ("d2h", "backup", 2, -1, -1, 0.001, 0.004, 1 << 20),
    ("l3", "store", -1, 17, -1, 0.004, 0.01, 1 << 20),
    ("nvme", "odd", -1, -1, -1, 0.0, 0.001, 0),
]


def _events(trace, ph, name=None):
    return [
        e for e in trace["traceEvents"] if e["ph"] == ph and (name is None or e["name"] == name)
    ]


def test_lane_order_is_stable_and_groups_engines_and_links():
    lanes = [r[0] for r in ROWS] + ["ce:d2h", "pcie:d2h"]
    assert lane_order(lanes) == ["compute", "h2d", "d2h", "ce:d2h", "ce:h2d", "pcie:d2h",
                                 "pcie:h2d", "l3", "cpu", "nvme"]  # fmt: skip


def test_trace_is_json_with_one_thread_per_lane_and_microsecond_units():
    trace = json.loads(json.dumps(chrome_trace(timeline_frame(ROWS), process_name="sim")))
    names = {e["tid"]: e["args"]["name"] for e in _events(trace, "M", "thread_name")}
    assert sorted(names.values()) == sorted({r[0] for r in ROWS})
    assert len(names) == len({r[0] for r in ROWS})  # distinct tids
    order = {e["tid"]: e["args"]["sort_index"] for e in _events(trace, "M", "thread_sort_index")}
    assert [names[t] for t in sorted(order, key=order.get)] == lane_order(names.values())
    assert _events(trace, "M", "process_name")[0]["args"]["name"] == "sim"
    xs = _events(trace, "X")
    assert len(xs) == len(ROWS)
    load = next(e for e in xs if e["cat"] == "h2d")
    assert load["name"] == "load" and names[load["tid"]] == "h2d"
    assert load["ts"] == pytest.approx(1500.0) and load["dur"] == pytest.approx(1000.0)
    assert load["args"] == {"batch": 3, "request": -1, "layer": 4, "bytes": 8 << 20}


def test_replica_column_makes_one_process_per_replica_with_shared_tids():
    df = timeline_frame(ROWS)
    df["replica"] = [0, 1, 0, 1, 0, 1, 0, 1]
    trace = chrome_trace(df)
    procs = {e["pid"]: e["args"]["name"] for e in _events(trace, "M", "process_name")}
    assert sorted(procs.values()) == ["replica0", "replica1"]
    xs = _events(trace, "X")
    assert sum(1 for e in xs if procs[e["pid"]] == "replica1") == 4
    tid_of = {}
    for e in xs:
        assert tid_of.setdefault(e["cat"], e["tid"]) == e["tid"]


def test_write_plain_and_gzip(tmp_path):
    df = timeline_frame(ROWS)
    plain = json.loads(write_chrome_trace(df, tmp_path / "t.json").read_text())
    with gzip.open(write_chrome_trace(df, tmp_path / "t.json.gz"), "rt") as f:
        assert json.load(f) == plain
    assert len(_events(plain, "X")) == len(ROWS)


def test_empty_timeline_gives_metadata_only():
    trace = chrome_trace(timeline_frame([]))
    assert _events(trace, "X") == [] and _events(trace, "M", "thread_name") == []
    json.dumps(trace)
