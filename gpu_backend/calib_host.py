"""Host-side microbenchmarks of calibration: what the driver thread spends per batch before
the device can start, and what a lane spends between two ops.

Measured with the runtime's own pieces (:class:`gpu_backend.streams.Lanes`,
:class:`gpu_backend.model.BatchIndex`, :class:`gpu_backend.runtime.TorchRuntime`):
- ``op_submit_s``: one ``lane.submit`` on the driver thread (CUDA: two timing events);
- ``op_gap_s``: idle time between two queued ops on the compute lane (CPU: the worker's
  hand-off and callbacks; CUDA: about zero);
- ``layer_launch_s``: issuing one layer's kernels (CUDA; 0 on CPU, where the lane's worker
  runs the layer and its time is compute time);
- ``setup``: ``[requests, new each, context each, seconds]`` of building a batch's index
  and moving it to the device (before the first layer can be issued);
- ``prepare``: ``[requests, tokens each, seconds]`` of ``TorchRuntime.prepare_batch`` for
  new requests without loads (row bookkeeping and page allocation).
Invariant: every figure is a median of repeated runs after warm-ups.
"""

from __future__ import annotations

import statistics
import threading
import time

import torch

from gpu_backend.calib_bench import HOLD_CYCLES, host_time, interleaved
from gpu_backend.calib_compute import ComputeBench, Point
from gpu_backend.shapes import ModelShape
from gpu_backend.streams import LaneEvent, Lanes
from hicache.runtime.handles import Kind
from hicache.runtime.interface import BatchCompletion, BatchPlan, Phase, Release, RequestSlice
from hicache.timeline import Timeline


def _lane_figures(device: str, reps: int = 40) -> tuple[float, float]:
    """(op_submit_s, op_gap_s) on a real compute lane."""
    lanes = Lanes(device)
    cuda = lanes.cuda
    tl = Timeline()
    lane = lanes["compute"]

    def rec(ev: LaneEvent) -> None:  # the runtime's callback: one timeline row per op
        tl.record(ev.lane, "op", ev.start, ev.end)

    x = torch.ones(64, 64, device=device)
    try:
        work = (lambda: x @ x)  # noqa: E731 - a small op with device time
        submits: list[float] = []
        gaps: list[float] = []
        for _ in range(3):
            gate = threading.Event()  # hold the lane so every op below is queued first
            lane.submit((lambda: torch.cuda._sleep(HOLD_CYCLES)) if cuda else gate.wait)
            evs = []
            for _ in range(reps):
                t = time.perf_counter()
                evs.append(lane.submit(work, [], [rec]))
                submits.append(time.perf_counter() - t)
            gate.set()
            evs[-1].wait(60)
            gaps += [b.start - a.end for a, b in zip(evs, evs[1:], strict=False)]
        return statistics.median(submits), max(0.0, statistics.median(gaps))
    finally:
        lanes.drain(60)
        lanes.close()


def _prepare_table(shape: ModelShape, device: str, page_size: int, requests: list[int],
                   tokens: list[int], reps: int = 9) -> list[list[float]]:
    """[requests, tokens each, seconds] of prepare_batch for that many new requests."""
    from gpu_backend.runtime import TorchRuntime

    pages = 2 * max(requests) * (-(-max(tokens) // page_size)) + 8
    out = []
    with TorchRuntime(shape, page_size=page_size, device_pages={Kind.FULL: pages},
                      host_pages={Kind.FULL: 0}, device=device) as rt:
        bid = rid = 0
        for n in requests:
            for t in tokens:
                times = []
                for _ in range(reps + 2):
                    bid += 1
                    slices = []
                    for _ in range(n):
                        rid += 1
                        slices.append(RequestSlice(rid, Phase.PREFILL, 0, t, finishes=True))
                    t0 = time.perf_counter()
                    h = rt.prepare_batch(BatchPlan(bid, slices=tuple(slices)))
                    times.append(time.perf_counter() - t0)
                    rt.execute_batch(h)
                    _wait_batch(rt, bid)
                    bid += 1
                    rt.execute_batch(rt.prepare_batch(BatchPlan(bid, releases=tuple(
                        Release(s.request) for s in h.slices))))
                    _wait_batch(rt, bid)
                out.append([n, t, statistics.median(times[2:])])
    return out


def _wait_batch(rt, bid: int) -> None:  # noqa: ANN001 - TorchRuntime
    while True:
        got = rt.wait(60)
        if not got:
            raise TimeoutError(f"calibration batch {bid} did not complete in 60 s")
        if any(isinstance(c, BatchCompletion) and c.batch_id == bid for c in got):
            return


def measure_host(shape: ModelShape, device: str, page_size: int, points: list[Point]
                 ) -> dict[str, object]:
    """The host figures of the module doc (``points``: batch shapes for ``setup``)."""
    cuda = device.startswith("cuda")
    submit, gap = _lane_figures(device)
    bench = ComputeBench(shape, device, page_size, points)
    # no stream hold here: building the index waits for nothing on the device
    t = interleaved([lambda p=p: host_time(lambda: bench.index(p), False) for p in points])
    setup = [[*p, x] for p, x in zip(points, t, strict=True)]
    launch = 0.0
    if cuda:
        launches = []
        for p in points[:: max(1, len(points) // 4)]:
            idx = bench.index(p)
            x = bench.model.embed_tokens(idx)
            launches.append(host_time(
                lambda idx=idx, x=x: bench.model.forward_layer(0, x, idx, bench.pool), True))
        launch = statistics.median(launches)
    return {"op_submit_s": submit, "op_gap_s": gap, "layer_launch_s": launch,
            "setup": setup,
            "prepare": _prepare_table(shape, device, page_size, [1, 4, 16], [16, 256])}
