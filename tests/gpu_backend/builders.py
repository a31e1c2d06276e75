"""Builders shared by the torch-runtime tests (CPU, tiny shapes)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gpu_backend.l3_protocol import MemoryL3
from gpu_backend.pools import DevicePool, HostPool
from gpu_backend.runtime import TorchRuntime
from gpu_backend.shapes import ModelShape
from hicache.runtime.handles import Kind
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    Completion,
    Phase,
    PreparedBatchHandle,
    Release,
    RequestSlice,
    TransferCompletion,
)


def make_pools(layout: str, dev_pages: int = 16, host_pages: int = 16, page_size: int = 4,
               shape: ModelShape | None = None) -> tuple[DevicePool, HostPool]:
    s = shape or ModelShape.tiny()
    dims = (s.num_layers, page_size, s.kv_heads_per_rank, s.head_dim)
    L, ps, h, d = dims
    dev = DevicePool(L, dev_pages, ps, h, d, torch.float32, "cpu")
    host = HostPool(layout, L, host_pages, ps, h, d, torch.float32, pin=False)
    return dev, host


def make_runtime(**kw) -> TorchRuntime:
    args = dict(page_size=4, device_pages={Kind.FULL: 32}, host_pages={Kind.FULL: 32},
                l3=MemoryL3())
    args.update(kw)
    shape = args.pop("shape", ModelShape.tiny())
    return TorchRuntime(shape, **args)


def run(rt: TorchRuntime, plan: BatchPlan) -> PreparedBatchHandle:
    h = rt.prepare_batch(plan)
    rt.execute_batch(h)
    return h


def collect(rt: TorchRuntime, done: Callable[[list[Completion]], bool],
            timeout: float = 20.0) -> list[Completion]:
    """Completions until ``done(all so far)`` holds; fails the test on timeout."""
    got: list[Completion] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting; got {got}"
        got += rt.wait(min(left, 1.0))
    return got


def batches_done(*ids):
    return lambda got: {c.batch_id for c in got if isinstance(c, BatchCompletion)} >= set(ids)


def jobs_done(*ids):
    return lambda got: {c.job_id for c in got if isinstance(c, TransferCompletion)} >= set(ids)


def cached_prefix(rt, rid=1, tokens=16, batch=100):
    """Prefill ``rid``, release it keeping its pages (as the tree would), back them up."""
    h = run(rt, BatchPlan(batch, slices=(RequestSlice(rid, Phase.PREFILL, 0, tokens),)))
    kv = h.slices[0].kv
    b = run(rt, BatchPlan(batch + 1, releases=(Release(h.slices[0].request, keep=kv),),
                          backups=(BackupIntent(kv, job_id=batch),)))
    collect(rt, jobs_done(batch))
    return kv, b.backups[0]
