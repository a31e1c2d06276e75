"""DataFrames with fixed columns and dtypes for timelines and per-request records.

Invariants:
- :func:`timeline_frame` has exactly ``hicache.timeline.COLUMNS + ("duration",)`` (plus
  ``replica`` only when the input carries one): ``lane``/``op`` str, ``batch``/``request``/
  ``layer``/``bytes``/``steps`` int64 (``steps`` 1 when the input predates it),
  ``start``/``end``/``duration`` float64 seconds.
- :func:`requests_frame` has exactly :data:`REQUEST_COLUMNS` (the helper brief's
  per-request record); times float64 seconds (NaN when absent), counts int64,
  ``cached_tokens == device_hit + host_hit + l3_hit`` (checked).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from hicache.timeline import COLUMNS, Timeline, TimelineRow

TIMELINE_COLUMNS: tuple[str, ...] = (*COLUMNS, "duration")
_TL_INT = ("batch", "request", "layer", "bytes", "steps")
_TL_FLOAT = ("start", "end", "duration")
_TL_STR = ("lane", "op")

REQUEST_COLUMNS: tuple[str, ...] = (
    "rid", "replica", "client", "round", "session_id",
    "arrival", "admitted", "first_token", "finish",
    "prompt_tokens", "output_tokens", "cached_tokens",
    "device_hit", "host_hit", "l3_hit", "ttft", "itl_mean", "rejected",
)  # fmt: skip
_REQ_INT = (
    "rid", "replica", "client", "round",
    "prompt_tokens", "output_tokens", "cached_tokens", "device_hit", "host_hit", "l3_hit",
)  # fmt: skip
_REQ_FLOAT = ("arrival", "admitted", "first_token", "finish", "ttft", "itl_mean")
_REQ_INT_DEFAULT = {"replica": 0, "client": -1, "round": -1}


def _str_column(values) -> pd.Series:
    return pd.Series(values, dtype=object).astype(str)


def timeline_frame(timeline_or_rows) -> pd.DataFrame:
    """Timeline, rows (TimelineRow, tuples in COLUMNS order, or dicts) or a DataFrame ->
    the canonical timeline DataFrame. ``duration`` is recomputed as ``end - start``."""
    src = timeline_or_rows
    if isinstance(src, Timeline):
        src = src.as_tuples()  # the same rows, without building a TimelineRow each
    if isinstance(src, pd.DataFrame):
        df = src.copy()
    else:
        rows = list(src)
        if rows and isinstance(rows[0], TimelineRow):
            df = pd.DataFrame([_row_tuple(r) for r in rows], columns=list(COLUMNS))
        elif rows and isinstance(rows[0], Mapping):
            df = pd.DataFrame.from_records(rows)
        else:  # tuples in COLUMNS order (without ``steps``: written before it existed)
            width = len(rows[0]) if rows else len(COLUMNS)
            df = pd.DataFrame(rows, columns=list(COLUMNS[:width]))
    if "steps" not in df.columns:  # written before folded decode rows existed: one step
        df["steps"] = 1
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"timeline is missing columns {missing}")
    out = pd.DataFrame(index=pd.RangeIndex(len(df)))
    for c in COLUMNS:
        col = df[c].to_numpy()
        if c in _TL_STR:
            out[c] = _str_column(col)
        elif c in _TL_INT:
            out[c] = np.asarray(col, dtype=np.int64)
        else:
            out[c] = np.asarray(col, dtype=np.float64)
    out["duration"] = out["end"] - out["start"]
    if (out["duration"] < 0).any():
        raise ValueError("timeline row ends before it starts")
    if "replica" in df.columns:
        out["replica"] = df["replica"].to_numpy()
    return out


def _row_tuple(r: TimelineRow) -> tuple:
    return (r.lane, r.op, r.batch, r.request, r.layer, r.start, r.end, r.bytes, r.steps)


def requests_frame(records: Iterable[Mapping]) -> pd.DataFrame:
    """Per-request records (dicts with the brief's keys) -> DataFrame of REQUEST_COLUMNS.

    Absent optional values are filled: times NaN; ``replica`` 0, ``client``/``round`` -1;
    ``ttft`` from ``first_token - arrival``; ``cached_tokens`` from the tier split (and the
    split's absent tiers from 0). Extra keys are dropped. Raises ValueError on records
    whose cached_tokens disagrees with device_hit + host_hit + l3_hit.
    """
    raw = pd.DataFrame.from_records(list(records))
    n = len(raw)
    out = pd.DataFrame(index=pd.RangeIndex(n))

    def get(c, default):
        return raw[c] if c in raw.columns else pd.Series([default] * n, dtype=object)

    for c in REQUEST_COLUMNS:
        if c in _REQ_FLOAT:
            out[c] = pd.to_numeric(get(c, np.nan), errors="raise").astype(np.float64)
        elif c in ("session_id", "rejected"):  # rejected: why the request was refused
            s = get(c, None)
            out[c] = s.astype(object).where(s.notna(), None)
        elif c in ("cached_tokens",):
            continue
        else:
            default = _REQ_INT_DEFAULT.get(c, 0)
            if c in ("rid", "prompt_tokens", "output_tokens") and c not in raw.columns and n:
                raise ValueError(f"request records lack {c!r}")
            out[c] = get(c, default).fillna(default).astype(np.int64)
    split = out["device_hit"] + out["host_hit"] + out["l3_hit"]
    if "cached_tokens" in raw.columns:
        given = pd.to_numeric(raw["cached_tokens"])
        cached = given.where(given.notna(), split).astype(np.int64)
        has_split = any(c in raw.columns for c in ("device_hit", "host_hit", "l3_hit"))
        if has_split and (cached != split).any():
            bad = out.loc[cached != split, "rid"].tolist()[:5]
            raise ValueError(f"cached_tokens != device_hit + host_hit + l3_hit for rids {bad}")
        out["cached_tokens"] = cached
    else:
        out["cached_tokens"] = split.astype(np.int64)
    derived = out["first_token"] - out["arrival"]
    out["ttft"] = out["ttft"].where(out["ttft"].notna(), derived)
    return out[list(REQUEST_COLUMNS)]


def write_timeline_parquet(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a timeline (normalised by :func:`timeline_frame`) to parquet; returns the path."""
    path = Path(path)
    timeline_frame(df).to_parquet(path, index=False)
    return path


def read_timeline_parquet(path: str | Path) -> pd.DataFrame:
    """Read a parquet timeline back into the canonical dtypes."""
    return timeline_frame(pd.read_parquet(path))


def write_requests_parquet(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a requests frame (REQUEST_COLUMNS) to parquet; returns the path."""
    path = Path(path)
    df[list(REQUEST_COLUMNS)].to_parquet(path, index=False)
    return path


def read_requests_parquet(path: str | Path) -> pd.DataFrame:
    """Read a parquet requests frame back, re-validating it."""
    return requests_frame(pd.read_parquet(path).to_dict("records"))
