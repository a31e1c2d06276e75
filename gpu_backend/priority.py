"""Run a measurement at high scheduling priority, so other processes on a shared box
disturb it less.

``high_priority(mode)`` raises the calling thread's priority for the ``with`` block and
restores it after; threads started inside (the runtime's lane workers) inherit it, as
Linux threads inherit their creator's policy. Modes, tried in order from the one asked:

- ``fifo``: real-time ``SCHED_FIFO`` priority 10 (``chrt -f 10``): runnable threads of
  ours preempt every normal process at once, so a lane or driver thread that wakes up
  runs without waiting a time slice of another job (the measured noise floor on the
  project's loaded 2-core box drops from 0.3-0.4 to ~0.05). The kernel's real-time
  throttling (``sched_rt_runtime_us``, 95 % by default) keeps the box responsive;
- ``nice``: niceness -15 (a larger share of the CPU, still behind a woken real-time
  thread's latency);
- ``none``: as started.

Needs root or CAP_SYS_NICE for the first two; without it the next mode is tried. The
block yields what was applied (for the measurement's environment record). The
measurement's thread wake-up and lock hand-over latencies (:mod:`gpu_backend.calib_gil`)
depend on this, so calibrate and measure under the same priority (``measure`` does both
inside one block).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

MODES = ("fifo", "nice", "none")
FIFO_PRIORITY = 10
NICENESS = -15


@contextmanager
def high_priority(mode: str = "fifo") -> Iterator[str]:
    """Raise this thread's priority (module doc); yields what was applied."""
    if mode not in MODES:
        raise ValueError(f"priority must be one of {', '.join(MODES)}, got {mode!r}")
    order = MODES[MODES.index(mode):]
    undo = None
    applied = "none"
    for m in order:
        try:
            if m == "fifo":
                before = os.sched_getscheduler(0), os.sched_getparam(0)
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
                undo = lambda b=before: os.sched_setscheduler(0, b[0], b[1])  # noqa: E731
                applied = f"SCHED_FIFO {FIFO_PRIORITY}"
            elif m == "nice":
                old = os.getpriority(os.PRIO_PROCESS, 0)
                os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
                undo = lambda o=old: os.setpriority(os.PRIO_PROCESS, 0, o)  # noqa: E731
                applied = f"nice {NICENESS}"
            break
        except (AttributeError, OSError):  # not permitted, or not Linux
            continue
    try:
        yield applied
    finally:
        if undo is not None:
            try:
                undo()
            except OSError:
                pass
