"""Compute microbenchmarks of calibration: one layer of the synthetic model over a grid of
batch shapes, the embedding, the LM head with sampling, and the slowdown of compute while
copy kernels run.

Grid rows are ``[requests, new tokens each, context tokens each, seconds]`` (one layer,
device time): prefill rows vary tokens x context (and a few multi-request batches), decode
rows vary batch size x context. The simulator fits its cost model to these points
(:mod:`sim.cost`); nothing is fitted here. Invariant: every point's pages are distinct, so
the measured attention reads as many keys as the row says.
"""

from __future__ import annotations

import threading

import torch

from gpu_backend.calib_bench import interleaved, time_op
from gpu_backend.io import Mover
from gpu_backend.model import BatchIndex, SliceSpec, SyntheticModel
from gpu_backend.pools import DevicePool, HostPool
from gpu_backend.shapes import ModelShape

Point = tuple[int, int, int]  # (requests, new tokens each, context tokens each)

GRIDS: dict[str, dict[str, list[Point]]] = {
    "quick": {  # CPU, tiny shape: seconds in all
        "prefill": [(1, n, c) for n in (16, 64, 256) for c in (0, 128, 512)]
        + [(2, 64, 0), (2, 64, 256), (4, 32, 0), (4, 32, 128)],
        # B x context beyond ~8K keys leaves the caches and the allocator's fast path on
        # CPU (a 16 x 1024 decode layer takes 10 ms, not 0.7): outside the CPU scenarios
        "decode": [(b, 1, c) for b in (1, 4, 16) for c in (32, 256, 1024)
                   if b * (c + 1) <= 1 << 13],
    },
    "full": {  # CUDA, a real model: under a minute on an H100/H200
        "prefill": [(1, n, c) for n in (256, 1024, 4096) for c in (0, 2048, 8192)]
        + [(2, 1024, 0), (2, 1024, 2048), (4, 256, 0), (4, 256, 4096)],
        "decode": [(b, 1, c) for b in (1, 8, 32, 128) for c in (512, 2048, 8192)
                   if b * (c + 1) <= 1 << 19],
    },
}
SAMPLE_REQUESTS = {"quick": [1, 4, 16, 64], "full": [1, 8, 32, 128]}


class ComputeBench:
    """A one-layer model and a one-layer device pool large enough for every grid point."""

    def __init__(self, shape: ModelShape, device: str, page_size: int, points: list[Point]
                 ) -> None:
        self.cuda = device.startswith("cuda")
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        self.shape, self.device, self.ps = shape, device, page_size
        one = ModelShape(**{**{f: getattr(shape, f) for f in (
            "num_heads", "num_kv_heads", "head_dim", "hidden_size", "ffn_size", "dtype_bytes",
            "tensor_parallel", "vocab_size")}, "num_layers": 1})
        self.model = SyntheticModel(one, device, self.dtype, seed=0)
        pages = max(b * self._pages(n + c) for b, n, c in points) + 8  # (b, n, c) bounds
        self.pool = DevicePool(1, pages, page_size, shape.kv_heads_per_rank, shape.head_dim,
                               self.dtype, device)

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.ps)

    def specs(self, point: Point | list[tuple[int, int]]) -> list[SliceSpec]:
        """A uniform point ``(requests, new, context)`` or a list of ``(new, context)``
        slices, each on its own pages."""
        slices = [(point[1], point[2])] * point[0] if isinstance(point, tuple) else point
        out, first = [], 0
        for i, (n, c) in enumerate(slices):
            per = self._pages(n + c)
            out.append(SliceSpec(i, c, n, tuple(range(first, first + per))))
            first += per
        return out

    def index(self, point: Point | list[tuple[int, int]]) -> BatchIndex:
        return BatchIndex(self.specs(point), self.ps).to(self.device)

    def layer(self, point: Point) -> float:
        idx = self.index(point)
        x = self.model.embed_tokens(idx)
        return time_op(lambda: self.model.forward_layer(0, x, idx, self.pool), self.cuda)

    def embed(self, point: Point) -> float:
        """Layer 0's extra work: the embedding and the attention mask (built on first use)."""
        idx = self.index(point)

        def first() -> None:
            idx._mask = None
            idx.mask  # noqa: B018 - builds it
            self.model.embed_tokens(idx)
        return time_op(first, self.cuda)

    def sample(self, requests: int | list[tuple[int, int]]) -> float:
        idx = self.index((requests, 1, 0) if isinstance(requests, int) else requests)
        x = self.model.embed_tokens(idx)
        return time_op(lambda: self.model.sample(x, idx), self.cuda)

    def slowdown(self, point: Point, pages: int = 8) -> float:
        """Fractional slowdown of a layer while kernel-backend copies run beside it."""
        alone = self.layer(point)
        s = self.shape
        dev = DevicePool(s.num_layers, pages, self.ps, s.kv_heads_per_rank, s.head_dim,
                         self.dtype, self.device)
        host = HostPool("page_first", s.num_layers, pages, self.ps, s.kv_heads_per_rank,
                        s.head_dim, self.dtype, pin=self.cuda)
        m, ids = Mover(dev, host, "kernel"), list(range(pages))
        stop = threading.Event()

        def copies() -> None:
            stream = torch.cuda.Stream() if self.cuda else None
            while not stop.is_set():
                if stream is not None:
                    with torch.cuda.stream(stream):
                        m.d2h(ids, ids, range(s.num_layers))
                    stream.synchronize()
                else:
                    m.d2h(ids, ids, range(s.num_layers))
        t = threading.Thread(target=copies)
        t.start()
        try:
            busy = self.layer(point)
        finally:
            stop.set()
            t.join()
        return max(0.0, busy / alone - 1.0)


def measure_compute(shape: ModelShape, device: str, page_size: int, grid: str
                    ) -> dict[str, object]:
    """The ``calibrated.compute`` section plus the copy-kernel slowdown."""
    g = GRIDS[grid]
    bench = ComputeBench(shape, device, page_size, g["prefill"] + g["decode"])
    points = g["prefill"] + g["decode"]
    tokens = sorted({b * n for b, n, _ in g["prefill"]})
    reqs = SAMPLE_REQUESTS[grid]
    fns = ([lambda p=p: bench.layer(p) for p in points]
           + [lambda t=t: bench.embed((1, t, 0)) for t in tokens]
           + [lambda b=b: bench.sample(b) for b in reqs])
    t = interleaved(fns)
    n = len(g["prefill"])
    layer = [[*p, x] for p, x in zip(points, t, strict=False)]
    t = t[len(points):]
    biggest = max(g["prefill"], key=lambda p: p[0] * p[1])
    return {"attention": "padded", "prefill": layer[:n], "decode": layer[n:],
            "embed": [[k, x] for k, x in zip(tokens, t, strict=False)],
            "sample": [[k, x] for k, x in zip(reqs, t[len(tokens):], strict=True)],
            "slowdown": bench.slowdown(biggest)}
