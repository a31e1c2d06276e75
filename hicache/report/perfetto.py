"""Timeline frame -> Chrome trace event JSON (opens in Perfetto UI and chrome://tracing).

Invariants: one ``"X"`` (complete) event per timeline row with ``ts``/``dur`` in
microseconds; one thread (``tid``) per lane, the same tid for a lane in every process, named
by ``thread_name`` metadata and ordered by ``thread_sort_index`` in :func:`lane_order`
(compute, h2d, d2h, ce:*, pcie:*, l3, cpu, then any other lane alphabetically); one process
(``pid``) per replica when the frame has a ``replica`` column, else one named
``process_name``. Event args carry batch, request, layer and bytes.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from hicache.report.frames import timeline_frame

_FIXED = ("compute", "h2d", "d2h")
_TAIL = ("l3", "cpu")


def _lane_key(lane: str) -> tuple[int, str]:
    if lane in _FIXED:
        return (_FIXED.index(lane), "")
    if lane.startswith("ce:"):
        return (len(_FIXED), lane)
    if lane.startswith("pcie:"):
        return (len(_FIXED) + 1, lane)
    if lane in _TAIL:
        return (len(_FIXED) + 2 + _TAIL.index(lane), "")
    return (len(_FIXED) + 2 + len(_TAIL), lane)


def lane_order(lanes: Iterable[str]) -> list[str]:
    """Distinct lanes in display order (stable across runs)."""
    return sorted(set(lanes), key=_lane_key)


def _process_names(df: pd.DataFrame, process_name: str) -> dict:
    if "replica" not in df.columns:
        return {None: process_name}
    names = {}
    for r in sorted(df["replica"].unique(), key=str):
        try:
            names[r] = f"replica{int(r)}"
        except (TypeError, ValueError):
            names[r] = str(r)
    return names


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def chrome_trace(timeline_df: pd.DataFrame, *, process_name: str = "replica0") -> dict:
    """Build the trace dict ``{"traceEvents": [...], "displayTimeUnit": "ms"}``.

    With a ``replica`` column, integer replicas are named ``replica<N>`` and other values by
    their string; ``process_name`` names the single process otherwise.
    """
    df = timeline_frame(timeline_df if timeline_df is not None else [])
    lanes = lane_order(df["lane"]) if len(df) else []
    tids = {lane: i + 1 for i, lane in enumerate(lanes)}
    procs = _process_names(df, process_name)
    events: list[dict] = []
    for pid, (replica, pname) in enumerate(procs.items(), start=1):
        sub = df if replica is None else df[df["replica"] == replica]
        events += [_meta("process_name", pid, 0, name=pname),
                   _meta("process_sort_index", pid, 0, sort_index=pid)]  # fmt: skip
        for lane in lane_order(sub["lane"]):
            tid = tids[lane]
            events += [_meta("thread_name", pid, tid, name=lane),
                       _meta("thread_sort_index", pid, tid, sort_index=tid)]  # fmt: skip
        cols = zip(
            sub["lane"].tolist(), sub["op"].tolist(),
            (sub["start"] * 1e6).tolist(), ((sub["end"] - sub["start"]) * 1e6).tolist(),
            sub["batch"].tolist(), sub["request"].tolist(), sub["layer"].tolist(),
            sub["bytes"].tolist(), strict=True,
        )  # fmt: skip
        for lane, op, ts, dur, batch, request, layer, nbytes in cols:
            events.append({
                "ph": "X", "name": op, "cat": lane, "pid": pid, "tid": tids[lane],
                "ts": ts, "dur": dur,
                "args": {"batch": int(batch), "request": int(request), "layer": int(layer),
                         "bytes": int(nbytes)},
            })  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(
    df: pd.DataFrame, path: str | Path, *, process_name: str = "replica0"
) -> Path:
    """Write :func:`chrome_trace` as JSON (gzip-compressed when ``path`` ends in ``.gz``)."""
    path = Path(path)
    trace = chrome_trace(df, process_name=process_name)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))
    return path
