"""Timeline frame -> Chrome trace event JSON (opens in Perfetto UI and chrome://tracing).

Invariants:
- one ``"X"`` (complete) event per timeline row (in ``window`` when one is given), ``ts`` /
  ``dur`` in microseconds rounded to whole nanoseconds; args carry batch, request, layer
  and bytes, and ``steps`` for a folded decode run (sim.fold);
- slices on one thread never overlap: a lane whose rows run concurrently (several L3
  transfers in flight, say) is split into tracks ``lane``, ``lane #2``, ... by greedy
  interval partitioning (a row goes to the lowest-numbered track free at its start), so
  every thread holds disjoint slices and Perfetto draws them as they happened;
- a track has the same ``tid`` in every process, named by ``thread_name`` metadata and
  ordered by ``thread_sort_index`` as :func:`lane_order` orders lanes (compute, h2d, d2h,
  ce:*, pcie:*, l3, cpu, then any other lane alphabetically), tracks of a lane together;
- one process (``pid``) per replica when the frame has a ``replica`` column, else one
  named ``process_name``.
The JSON is written as text in one pass (no per-event dicts), several times faster than
``json.dump`` of the same events.
"""

from __future__ import annotations

import gzip
import heapq
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
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


def assign_tracks(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Track index per row such that rows on one track are disjoint (touching is fine):
    rows in start order each take the lowest-numbered track that is free at their start.
    Uses as many tracks as the most rows ever in flight at once."""
    order = np.lexsort((end_ns, start_ns))
    track = np.zeros(len(start_ns), dtype=np.int64)
    busy: list[tuple[int, int]] = []  # (end, track)
    free: list[int] = []
    n_tracks = 0
    for i in order.tolist():
        s = start_ns[i]
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            t = heapq.heappop(free)
        else:
            t, n_tracks = n_tracks, n_tracks + 1
        track[i] = t
        heapq.heappush(busy, (int(end_ns[i]), t))
    return track


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


def _meta(kind: str, pid: int, tid: int, **args) -> str:
    return json.dumps({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args},
                      separators=(",", ":"))


def _us(ns: int) -> str:
    """Whole nanoseconds as exact microseconds text: 1500000 -> '1500', 1234567 -> '1234.567'."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}".rstrip("0").rstrip(".") if r else str(q)


def _in_window(df: pd.DataFrame, window: tuple[float, float] | None) -> pd.DataFrame:
    if window is None or not len(df):
        return df
    a, b = window
    return df[(df["end"] >= a) & (df["start"] <= b)]


def chrome_trace_lines(timeline_df: pd.DataFrame | None, *, process_name: str = "replica0",
                       window: tuple[float, float] | None = None) -> Iterable[str]:
    """The trace's events as JSON texts, metadata first per process."""
    df = _in_window(timeline_frame(timeline_df if timeline_df is not None else []), window)
    start_ns = np.rint(df["start"].to_numpy(np.float64) * 1e9).astype(np.int64)
    end_ns = np.maximum(np.rint(df["end"].to_numpy(np.float64) * 1e9).astype(np.int64),
                        start_ns)
    lanes = df["lane"].to_numpy(object)
    keys = [lanes] if "replica" not in df.columns else [df["replica"].to_numpy(), lanes]
    track = np.zeros(len(df), dtype=np.int64)
    for ix in pd.Series(np.arange(len(df))).groupby(keys, sort=False).indices.values():
        track[ix] = assign_tracks(start_ns[ix], end_ns[ix])
    pairs = sorted({(lane, int(t)) for lane, t in zip(lanes.tolist(), track.tolist(),
                                                      strict=True)},
                   key=lambda p: (_lane_key(p[0]), p[1]))
    tids = {p: i + 1 for i, p in enumerate(pairs)}
    procs = _process_names(df, process_name)
    replicas = df["replica"].to_numpy() if "replica" in df.columns else None
    for pid, (replica, pname) in enumerate(procs.items(), start=1):
        mask = np.ones(len(df), bool) if replica is None else replicas == replica
        yield _meta("process_name", pid, 0, name=pname)
        yield _meta("process_sort_index", pid, 0, sort_index=pid)
        sub_pairs = {(la, int(t)) for la, t in zip(lanes[mask].tolist(),
                                                   track[mask].tolist(), strict=True)}
        for lane, t in sorted(sub_pairs, key=lambda p: tids[p]):
            tid = tids[(lane, t)]
            yield _meta("thread_name", pid, tid, name=lane if t == 0 else f"{lane} #{t + 1}")
            yield _meta("thread_sort_index", pid, tid, sort_index=tid)
        cols = zip(lanes[mask].tolist(), df["op"].to_numpy(object)[mask].tolist(),
                   start_ns[mask].tolist(), end_ns[mask].tolist(), track[mask].tolist(),
                   df["batch"].to_numpy()[mask].tolist(),
                   df["request"].to_numpy()[mask].tolist(),
                   df["layer"].to_numpy()[mask].tolist(),
                   df["bytes"].to_numpy()[mask].tolist(),
                   df["steps"].to_numpy()[mask].tolist(), strict=True)
        esc = json.dumps
        for lane, op, s, e, t, batch, request, layer, nbytes, steps in cols:
            more = f',"steps":{steps}' if steps != 1 else ""  # a folded decode run
            yield (f'{{"ph":"X","name":{esc(op)},"cat":{esc(lane)},"pid":{pid},'
                   f'"tid":{tids[(lane, t)]},"ts":{_us(s)},"dur":{_us(e - s)},'
                   f'"args":{{"batch":{batch},"request":{request},"layer":{layer},'
                   f'"bytes":{nbytes}{more}}}}}')


def chrome_trace(timeline_df: pd.DataFrame | None, *, process_name: str = "replica0",
                 window: tuple[float, float] | None = None) -> dict:
    """The trace as a dict ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` (the same
    events :func:`write_chrome_trace` writes)."""
    events = [json.loads(line) for line in chrome_trace_lines(
        timeline_df, process_name=process_name, window=window)]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(df: pd.DataFrame, path: str | Path, *, process_name: str = "replica0",
                       window: tuple[float, float] | None = None) -> Path:
    """Write the trace JSON (gzip-compressed when ``path`` ends in ``.gz``); ``window``
    (start, end) in seconds keeps only the rows overlapping it."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write('{"displayTimeUnit":"ms","traceEvents":[\n')
        first = True
        for line in chrome_trace_lines(df, process_name=process_name, window=window):
            f.write(line if first else ",\n" + line)
            first = False
        f.write("\n]}\n")
    return path
