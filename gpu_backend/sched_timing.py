"""The calibration scenario and the driver thread's gaps read from a run's timeline.

:data:`SCENARIO` (multi-turn chat over L1+L2 with evictions, loads and backups, one batch
in flight) is what :mod:`gpu_backend.calib_insitu` runs. The simulator models the runtime
calls themselves (its ``cpu`` lane, :mod:`sim.host`) and charges the driver's wake-up
(``cpu.wakeup_s``) and its step (``cpu.scheduler_step_s``) before a step's batches reach
the runtime, so those figures are what separates a batch's completion from the next
batch's ``prepare_batch`` on the driver thread: the driver waking up (the completion to
its first ``schedule`` row, :mod:`gpu_backend.driver`), then the scheduler's step and the
loop; a step costs ``cpu.insert_step_s`` more after a prefill batch (its prompts enter
the tree), ``cpu.finish_step_s`` more per request that finished (released; the workload
generates its follow-up) and ``cpu.admit_step_s`` more when it admits requests.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCENARIO: dict[str, Any] = {
    "name": "scheduler_step_calibration", "seed": 11,
    "cache": {"page_size": 16, "device_tokens": 512, "enable_hierarchical_cache": True,
              "hicache_ratio": 4.0, "hicache_write_policy": "write_through",
              "hicache_storage_prefetch_policy": "wait_complete",
              "hicache_io_backend": "direct", "load_back_threshold": 4},
    "scheduler": {"overlap": False, "max_running_requests": 2, "chunked_prefill_size": 256},
    "workload": {"kind": "multiturn", "num_clients": 6, "num_rounds": 3,
                 "request_length": [32, 64], "output_length": [4, 8],
                 "request_rate": math.inf, "max_parallel": 6, "system_prompt_length": 16},
}


@dataclass(frozen=True)
class Gap:
    """The driver thread between batch ``a``'s completion and batch ``b``'s prepare:
    ``wake`` (completion to its first scheduler step; None without ``schedule`` rows),
    ``step`` (from then to the prepare) and what the step had to do."""

    wake: float | None
    step: float
    after_prefill: bool  # a prefilled: its requests' prompts enter the tree
    admits: bool  # b prefills: requests admitted, prefixes matched
    finished: int  # requests that finished with a (released; a follow-up generated)


def driver_gaps(timeline: Any, finishes: Sequence[float] = ()) -> list[Gap]:
    """One :class:`Gap` per pair of consecutive batches from a run's timeline rows
    (``finishes``: the run's request finish times, each a batch's completion). A next
    batch that was prepared before the previous one completed is skipped: its gap is not
    the driver's. Without ``schedule`` rows (a runtime in another process) the whole gap
    counts as the step."""
    end: dict[int, float] = {}
    prep: dict[int, float] = {}
    prefill: set[int] = set()
    steps: list[float] = []
    for r in timeline.rows:
        if r.lane == "cpu" and r.op == "schedule":
            steps.append(r.start)
        if r.batch < 0:
            continue
        if r.lane == "cpu" and r.op == "prepare":
            prep[r.batch] = r.start
        elif r.lane == "compute":
            end[r.batch] = max(end.get(r.batch, r.end), r.end)
            if r.op == "prefill":
                prefill.add(r.batch)
    steps.sort()
    done = Counter(finishes)
    ids = sorted(b for b in end if b in prep)
    out: list[Gap] = []
    for a, b in zip(ids, ids[1:], strict=False):
        if prep[b] < end[a]:
            continue
        i = bisect.bisect_left(steps, end[a])
        woke = steps[i] if i < len(steps) and steps[i] <= prep[b] else None
        out.append(Gap(None if woke is None else woke - end[a],
                       prep[b] - (end[a] if woke is None else woke),
                       a in prefill, b in prefill, done[end[a]]))
    return out
