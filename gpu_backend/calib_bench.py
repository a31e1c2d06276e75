"""Timing primitives and the copy microbenchmarks of calibration.

``time_op`` times device work (CUDA: between events, with the stream held by a sleep
kernel while the work is queued, so host submission is excluded); ``host_time`` times the
calling thread (on CUDA: how long *issuing* takes, with the stream held so nothing waits).
Invariant: every figure is the median of repeated runs after two warm-ups.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from gpu_backend.io import Mover
from gpu_backend.pools import DevicePool, HostPool
from gpu_backend.shapes import ModelShape

HOLD_CYCLES = 20_000_000  # ~10 ms at 2 GHz: longer than any issue we time behind it


def time_op(fn: Callable[[], Any], cuda: bool, reps: int = 7, inner: int = 1) -> float:
    """Median seconds of one ``fn`` call on the device (``inner`` calls per timed run)."""
    for _ in range(2):  # warm up (allocator, kernel selection)
        fn()
    out = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda._sleep(HOLD_CYCLES // 10)  # hold the stream while the work is queued
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / inner)
        else:
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t) / inner)
    return statistics.median(out)


def interleaved(fns: list[Callable[[], float]], passes: int = 3) -> list[float]:
    """Run every timing ``fn`` once per pass, passes one after another, and return each
    one's median over the passes: a burst of load from another process then spoils one
    pass of a point, not all of its samples (the box these run on is shared)."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(passes):
        for i, fn in enumerate(fns):
            samples[i].append(fn())
    return [statistics.median(s) for s in samples]


def host_time(fn: Callable[[], Any], cuda: bool, reps: int = 7) -> float:
    """Median seconds the calling thread spends in ``fn`` (on CUDA: issuing only)."""
    for _ in range(2):
        fn()
    out = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda._sleep(HOLD_CYCLES)
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    if cuda:
        torch.cuda.synchronize()
    return statistics.median(out)


class CopyBench:
    """Device and host pools sized for the largest transfer of the sweep."""

    def __init__(self, shape: ModelShape, device: str, page_size: int, pages: int) -> None:
        self.cuda = device.startswith("cuda")
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        L, h, d = shape.num_layers, shape.kv_heads_per_rank, shape.head_dim
        self.shape, self.device, self.pages = shape, device, pages
        self.dev = DevicePool(L, pages, page_size, h, d, self.dtype, device)
        self.host = {lay: HostPool(lay, L, pages, page_size, h, d, self.dtype, pin=self.cuda)
                     for lay in ("layer_first", "page_first")}
        self.page_bytes = self.dev.bytes_per_page_layer * L

    def copy_table(self, direction: str, backend: str, layout: str,
                   counts: list[int]) -> list[list[float]]:
        """[bytes, seconds] of one all-layer Mover call over ``n`` consecutive pages."""
        mover = Mover(self.dev, self.host[layout], backend)
        fn = mover.h2d if direction == "h2d" else mover.d2h
        rows = []
        for n in counts:
            pages = list(range(n))
            t = time_op(lambda p=pages: fn(p, p, range(self.shape.num_layers)), self.cuda)
            rows.append([n * self.page_bytes, t])
        return rows

    def device_copy_rate(self) -> float:
        """Bytes/s of a device-to-device copy (read + write counted), the bandwidth a
        gather/scatter through a staging buffer gets: HBM on a GPU, DRAM on a CPU."""
        n = (256 << 20) if self.cuda else (32 << 20)
        src = torch.empty(n // 2, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        return n / time_op(lambda: dst.copy_(src), self.cuda)

    def issue_per_call(self, n: int = 8) -> float:
        """Host seconds per copy call the driver thread issues (CUDA: cudaMemcpyAsync;
        CPU: 0, the lane's worker thread issues and moves in one go)."""
        if not self.cuda:
            return 0.0
        mover = Mover(self.dev, self.host["layer_first"], "direct")
        dev, host = list(range(0, 2 * n, 2)), list(range(n))  # n runs: 2 x L x n calls
        before = mover.calls
        t = host_time(lambda: mover.h2d(dev, host, range(self.shape.num_layers)), True)
        calls = (mover.calls - before) // 9  # 2 warm-ups + 7 timed runs
        return t / max(calls, 1)

    def bidirectional(self, n: int, reps: int = 16) -> float:
        """Bytes/s with ``reps`` H2D and D2H copies of ``n/2`` pages each running at once."""
        half = n // 2
        a, b = list(range(half)), list(range(half, 2 * half))
        m = Mover(self.dev, self.host["layer_first"], "direct")
        layers = range(self.shape.num_layers)
        if self.cuda:
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

            def both() -> None:
                for _ in range(reps):
                    with torch.cuda.stream(s1):
                        m.h2d(a, a, layers)
                    with torch.cuda.stream(s2):
                        m.d2h(b, b, layers)
                torch.cuda.current_stream().wait_stream(s1)
                torch.cuda.current_stream().wait_stream(s2)
        else:
            def both() -> None:
                t = threading.Thread(target=lambda: [m.d2h(b, b, layers) for _ in range(reps)])
                t.start()
                for _ in range(reps):
                    m.h2d(a, a, layers)
                t.join()
        return 2 * half * reps * self.page_bytes / time_op(both, self.cuda)
