"""Optional torch.profiler Chrome trace of a torch run, with one lane per runtime stream.

``torch_profiler(path, cuda)`` wraps a run in ``torch.profiler.profile`` (CPU activity, plus
CUDA when the run is on CUDA, where kineto already puts each CUDA stream's kernels and
copies on its own row) and exports a Chrome trace to ``path``. The profiler sees only the
thread that started it (CPU lanes run on worker threads it does not record), so
:func:`add_lanes` appends the runtime's own timeline to the same file: one process
``hicache lanes`` with one named thread per lane (compute, h2d, d2h, l3), one ``X``
event per timeline row. Invariant: the file stays valid Chrome-trace JSON, and lane events
sit on the profiler's time axis (both derive from the wall clock; ``wall0`` is the epoch
time of the runtime clock's zero).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from hicache.timeline import Timeline

LANES_PID = "hicache lanes"


@contextmanager
def torch_profiler(path: str | Path, cuda: bool) -> Iterator[Any]:
    """Profile the body; export a Chrome trace to ``path`` when it exits normally."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=acts, record_shapes=False) as prof:
        yield prof
    if cuda:
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))


def wall_epoch(now: float) -> float:
    """Epoch seconds of a clock's zero, given that clock's current reading ``now``."""
    return time.time() - now


def add_lanes(path: str | Path, timeline: Timeline, wall0: float) -> int:
    """Append ``timeline`` to the Chrome trace at ``path`` (one named thread per lane);
    returns the number of events added."""
    p = Path(path)
    data = json.loads(p.read_text())
    if isinstance(data, list):
        data = {"traceEvents": data}
    base_us = float(data.get("baseTimeNanoseconds", 0)) / 1e3
    events: list[dict] = data.setdefault("traceEvents", [])
    lanes: dict[str, int] = {}
    added = 0
    events.append({"ph": "M", "name": "process_name", "pid": LANES_PID, "tid": 0,
                   "args": {"name": "hicache lanes (runtime timeline)"}})
    for row in timeline.rows:
        if row.lane not in lanes:
            tid = lanes[row.lane] = len(lanes) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": LANES_PID, "tid": tid,
                           "args": {"name": f"lane {row.lane}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": LANES_PID,
                           "tid": tid, "args": {"sort_index": tid}})
        events.append({
            "ph": "X", "pid": LANES_PID, "tid": lanes[row.lane], "cat": row.lane,
            "name": row.op if row.layer < 0 else f"{row.op} L{row.layer}",
            "ts": (wall0 + row.start) * 1e6 - base_us, "dur": (row.end - row.start) * 1e6,
            "args": {"batch": row.batch, "request": row.request, "layer": row.layer,
                     "bytes": row.bytes},
        })
        added += 1
    p.write_text(json.dumps(data))
    return added
