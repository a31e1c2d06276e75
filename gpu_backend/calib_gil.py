"""Interpreter-lock microbenchmark of calibration (CPU runtime): how fast the driver thread
and a lane's worker thread run when both need CPython's interpreter lock (the GIL), and
how long a thread takes to wake up.

The CPU runtime's driver thread and its lanes' worker threads share one GIL. Lane ops are
made of small torch calls (a layer of the tiny model, a copy's per-page calls): each call
releases the lock while its kernel runs and takes it back after. The driver's work comes
in bursts between two waits, of two kinds that meet a busy lane very differently:

- ``python``: pure interpreter work (the scheduler's step, prepare_batch's bookkeeping,
  lane submits). It keeps the lock until it blocks: the lane stops (the convoy effect),
  and resumes a thread wake-up after the driver blocks;
- ``torch``: many small torch calls (building a batch's index in execute_batch). Both
  threads then hand the lock to each other at every call, and each hand-over is a thread
  wake-up on the other core: both slow down far more than if they took turns.

Measured, for each driver kind k, while a lane thread repeats ``torch`` units back to back
and the calling thread runs bursts of k-units (two lengths, ``BURSTS_S``) with pauses
between them (as the driver blocks between steps): ``driver_<k>``, the driver's speed
over its bursts (solo time / time beside the lane), and the lane's lost time per burst,
``(1 - lane_<k>) * burst + wake``, from the lane's work done over the whole run against
its solo speed; the two burst lengths give ``lane_<k>`` (its speed while the burst runs)
and, for ``python``, ``wake_s`` (how long after the driver blocks the lane runs again: a
thread wake-up; on this project's VM a vCPU leaving its idle state, ~45 us). ``lanes``:
two lanes' threads beside each other (the mean of both speeds of a ``torch`` burst beside
the ``torch`` lane). A unit of ``torch`` work is building a
:class:`gpu_backend.model.BatchIndex` (what execute_batch does); of ``python`` work, a
dict-and-list loop. Medians over repeats (the lock's hand-overs are a race, and a box's
load moves single runs). Invariant: every speed is in [0.01, 1], ``wake_s`` >= 0.

The simulator (:mod:`sim.interpreter`) applies them to ops by their interpreter share.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

from gpu_backend.model import BatchIndex, SliceSpec

KINDS = ("python", "torch")
BURSTS_S = (1e-4, 1e-3)
BURSTS = 16


def python_unit() -> None:
    """~30 us of pure interpreter work (dict and list bookkeeping, as a scheduler does)."""
    d: dict[int, int] = {}
    out = []
    for i in range(400):
        d[i % 97] = d.get(i % 97, 0) + i
        if i % 7 == 0:
            out.append(i)


_SPECS = [SliceSpec(i, 100, 1, tuple(range(i * 8, i * 8 + 8))) for i in range(4)]


def torch_unit() -> None:
    """~100 us of small torch calls: the index of a 4-request decode batch."""
    BatchIndex(_SPECS, 16)


UNITS: dict[str, Callable[[], None]] = {"python": python_unit, "torch": torch_unit}


def _solo(fn: Callable[[], None], reps: int = 30) -> float:
    for _ in range(5):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _run(kind: str, burst_s: float) -> tuple[float, float, float]:
    """(driver speed over ``kind`` bursts of ``burst_s``, the lane's lost time per burst,
    the bursts' mean length), from one run."""
    unit_d, unit_l = UNITS[kind], UNITS["torch"]
    solo_l = _solo(unit_l)
    k = max(1, round(burst_s / _solo(unit_d)))

    def burst() -> None:
        for _ in range(k):
            unit_d()

    solo_b = _solo(burst, 9)
    stop = threading.Event()
    spans: list[tuple[float, float]] = []

    def lane() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            unit_l()
            spans.append((t, time.perf_counter()))

    th = threading.Thread(target=lane, name="calib-gil-lane", daemon=True)
    th.start()
    bursts = []
    try:
        time.sleep(0.003)
        for _ in range(BURSTS):
            t = time.perf_counter()
            burst()
            bursts.append((t, time.perf_counter()))
            time.sleep(0.001)
    finally:
        stop.set()
        th.join(5.0)
    t0, t1 = bursts[0][0], bursts[-1][1] + 1e-3  # the last pause lets the lane wake up
    work = sum(solo_l * (min(e, t1) - max(s, t0)) / (e - s)
               for s, e in spans if min(e, t1) > max(s, t0))
    lengths = [e - s for s, e in bursts]
    return (solo_b / statistics.median(lengths), ((t1 - t0) - work) / len(bursts),
            statistics.fmean(lengths))


def speeds(short: tuple[float, float, float], long: tuple[float, float, float]
           ) -> tuple[float, float, float]:
    """(driver speed, lane speed, wake seconds) from two runs ``(driver speed, lane's lost
    time per burst, burst length)``: the lost time is a line in the burst's length, slope
    1 - lane speed, intercept the wake-up."""
    (d1, lost1, b1), (d2, lost2, b2) = short, long
    slope = (lost2 - lost1) / (b2 - b1)
    return (d1 + d2) / 2, 1.0 - slope, lost1 - slope * b1


def measure_interpreter(repeats: int = 3) -> dict[str, float]:
    """``driver_python``, ``lane_python``, ``driver_torch``, ``lane_torch``, ``lanes`` and
    ``wake_s`` (module doc)."""
    got: dict[str, list[float]] = {}
    for _ in range(repeats):
        for kind in KINDS:
            d, ln, wake = speeds(*(_run(kind, b) for b in BURSTS_S))
            got.setdefault(f"driver_{kind}", []).append(d)
            got.setdefault(f"lane_{kind}", []).append(ln)
            if kind == "python":
                got.setdefault("wake_s", []).append(wake)
            else:
                got.setdefault("lanes", []).append((d + ln) / 2)
    out = {k: round(min(1.0, max(0.01, statistics.median(v))), 4)
           for k, v in got.items() if k != "wake_s"}
    out["wake_s"] = max(0.0, statistics.median(got["wake_s"]))
    return out
