"""The calibration scenario and the driver thread's gaps read from a run's timeline.

:data:`SCENARIO` (multi-turn chat over L1+L2 with evictions, loads and backups, one batch
in flight) is what :mod:`gpu_backend.calib_insitu` runs. The simulator models the runtime
calls themselves (its ``cpu`` lane, :mod:`sim.host`) and charges ``cpu.scheduler_step_s``
before a step's batches reach the runtime, so that figure is what separates a batch's
completion from the next batch's ``prepare_batch`` on the driver thread: waking up, the
scheduler's step, the loop; a step that admits requests costs ``cpu.admit_step_s`` more.
``cpu.handoff_s`` separates execute_batch's end from the
batch's first device-lane op: on CPU the lanes' worker threads wait for the driver thread
to block (the GIL); on CUDA about 0.
"""

from __future__ import annotations

import math
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


def driver_gaps(timeline: Any) -> tuple[list[float], list[float], list[float]]:
    """(completion -> next prepare before a decode batch, the same before a prefill batch,
    execute end -> first device op) per batch, from one run's timeline rows (batches in
    id order; a next batch that was prepared before the previous one completed is skipped:
    its gap is not the driver's). A step that admits requests (its batch prefills) does
    more scheduler work than one that only decodes."""
    first: dict[int, float] = {}
    end: dict[int, float] = {}
    prep: dict[int, float] = {}
    exe: dict[int, float] = {}
    prefill: set[int] = set()
    for r in timeline.rows:
        if r.batch < 0:
            continue
        if r.lane == "cpu":
            if r.op == "prepare":
                prep[r.batch] = r.start
            else:
                exe[r.batch] = r.end
        elif r.lane in ("compute", "h2d"):
            first[r.batch] = min(first.get(r.batch, r.start), r.start)
            if r.lane == "compute":
                end[r.batch] = max(end.get(r.batch, r.end), r.end)
                if r.op == "prefill":
                    prefill.add(r.batch)
    ids = sorted(b for b in end if b in prep)
    dec: list[float] = []
    pre: list[float] = []
    for a, b in zip(ids, ids[1:], strict=False):
        if prep[b] >= end[a]:
            (pre if b in prefill else dec).append(prep[b] - end[a])
    hand = [first[b] - exe[b] for b in ids if b in exe and first[b] >= exe[b]]
    return dec, pre, hand
