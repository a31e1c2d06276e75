"""TorchRuntime through the RuntimeInterface: plans in, completions out (CPU lanes)."""

from __future__ import annotations

import time

import pytest
import torch

from gpu_backend.pools import CapacityError
from hicache.runtime.handles import CacheExtentRef, Kind, StaleHandleError
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    LoadIntent,
    Phase,
    Release,
    RequestSlice,
    RuntimeInterface,
)
from tests.gpu_backend.builders import (
    batches_done,
    cached_prefix,
    collect,
    make_runtime,
    run,
)

P, D = Phase.PREFILL, Phase.DECODE


def test_runtime_satisfies_the_protocol_and_reports_its_pools():
    with make_runtime() as rt:
        assert isinstance(rt, RuntimeInterface)
        info = rt.info()
        assert info.device_pages == {Kind.FULL: 32} and info.num_layers == 4
        assert info.bytes_per_page[Kind.FULL] == 2 * 4 * 4 * 2 * 16 * 4  # 2*L*page*H*D*fp32


def test_two_batch_plan_round_trip():
    with make_runtime() as rt:
        h1 = run(rt, BatchPlan(1, slices=(RequestSlice(1, P, 0, 10), RequestSlice(2, P, 0, 6))))
        r1, r2 = (s.request for s in h1.slices)
        # batch 2 is prepared while batch 1 may still run: decode one token each
        h2 = run(rt, BatchPlan(2, slices=(
            RequestSlice(1, D, 10, 1, request=r1, finishes=True),
            RequestSlice(2, D, 6, 1, request=r2))))
        got = collect(rt, batches_done(1, 2))
        done = [c for c in got if isinstance(c, BatchCompletion)]
        assert [c.batch_id for c in done] == [1, 2]
        assert done[0].end <= done[1].start and done[1].finished == (1,)
        assert h2.slices[0].kv.num_pages == 3 and h2.slices[1].kv.num_pages == 2
        rows = [r for r in rt.timeline.rows if r.lane == "compute"]
        # one row per layer, then the batch's LM head and sampling
        assert [(r.op, r.batch, r.layer) for r in rows] == (
            [("prefill", 1, i) for i in range(4)] + [("sample", 1, -1)]
            + [("decode", 2, i) for i in range(4)] + [("sample", 2, -1)])
        assert all(torch.isfinite(rt.outputs[rid]).all() for rid in (1, 2))
        assert all(0 <= int(rt.tokens[rid]) < rt.shape.vocab_size for rid in (1, 2))
        # the driver thread's host work is on lane cpu, one prepare and execute per batch
        cpu = [(r.op, r.batch) for r in rt.timeline.rows if r.lane == "cpu"]
        assert cpu == [("prepare", 1), ("execute", 1), ("prepare", 2), ("execute", 2)]
        run(rt, BatchPlan(3, releases=(Release(r1), Release(r2))))
        rt.drain()
        assert rt.dev_alloc.num_allocated == 0 and rt.dev_alloc.num_free == 32


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("io_backend", ["direct", "kernel"])
def test_attention_over_restored_pages_equals_attention_over_the_originals(layout, io_backend):
    with make_runtime(mem_layout=layout, io_backend=io_backend) as rt:
        kv, host = cached_prefix(rt)
        outs = []
        for i, slice_ in enumerate([
            RequestSlice(2, P, 16, 3, attach=(kv,)),  # reads the original device pages
            RequestSlice(2, P, 16, 3, loads=(LoadIntent(host),)),  # reads restored pages
        ]):
            h = run(rt, BatchPlan(10 + i, slices=(slice_,)))
            collect(rt, batches_done(10 + i))
            outs.append(rt.outputs[2].clone())
            run(rt, BatchPlan(20 + i, releases=(Release(h.slices[0].request),)))
        assert set(h.slices[0].loaded[0].pages()).isdisjoint(kv.pages())
        assert torch.equal(outs[0], outs[1])
        # the comparison can fail: a corrupted host copy changes the output
        rt.host.page_tensor(next(host.pages())).add_(1.0)
        run(rt, BatchPlan(30, slices=(RequestSlice(2, P, 16, 3, loads=(LoadIntent(host),)),)))
        collect(rt, batches_done(30))
        assert not torch.allclose(rt.outputs[2], outs[0])


@pytest.mark.parametrize("layerwise", [True, False])
def test_compute_of_layer_i_starts_only_after_load_of_layer_i(layerwise):
    with make_runtime(layerwise=layerwise) as rt:
        kv, host = cached_prefix(rt)
        run(rt, BatchPlan(40, frees=(kv,)))
        copy = rt.mover.h2d

        def slow_h2d(*args):  # slow loads: a compute that did not wait would start early
            time.sleep(0.02)
            copy(*args)

        rt.mover.h2d = slow_h2d
        run(rt, BatchPlan(41, slices=(RequestSlice(2, P, 16, 4, loads=(LoadIntent(host),)),)))
        collect(rt, batches_done(41))
        loads = [r for r in rt.timeline.rows if r.lane == "h2d" and r.batch == 41]
        comp = [r for r in rt.timeline.rows
                if r.lane == "compute" and r.batch == 41 and r.layer >= 0]
        assert len(comp) == 4 and len(loads) == (4 if layerwise else 1)
        for r in comp:
            load = loads[r.layer] if layerwise else loads[0]
            assert r.start >= load.end
        assert all(r.bytes > 0 for r in loads)


def test_stale_generation_and_foreign_handles_are_rejected():
    with make_runtime() as rt:
        h = run(rt, BatchPlan(1, slices=(RequestSlice(1, P, 0, 8),)))
        kv, req = h.slices[0].kv, h.slices[0].request
        old = CacheExtentRef(rt.runtime_id, rt.generation - 1, kv.tier, kv.page_runs)
        other = CacheExtentRef("elsewhere", rt.generation, kv.tier, kv.page_runs)
        for ext in (old, other):
            with pytest.raises(StaleHandleError):
                rt.prepare_batch(BatchPlan(2, backups=(BackupIntent(ext, 1),)))
        run(rt, BatchPlan(3, releases=(Release(req),)))
        with pytest.raises(StaleHandleError):  # the row was closed
            rt.prepare_batch(BatchPlan(4, slices=(RequestSlice(1, D, 8, 1, request=req),)))
        h5 = rt.prepare_batch(BatchPlan(5))
        with pytest.raises(StaleHandleError):
            rt.execute_batch(type(h5)("torch0", rt.generation + 1, 5, (), ()))


def test_contract_violations_raise():
    with make_runtime(device_pages={Kind.FULL: 4}) as rt:
        with pytest.raises(CapacityError):
            rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, P, 0, 17),)))
        with pytest.raises(ValueError):  # context does not match the row
            rt.prepare_batch(BatchPlan(2, slices=(RequestSlice(2, P, 5, 1),)))


def test_no_page_is_leaked_after_releases_frees_and_loads():
    with make_runtime() as rt:
        kv, host = cached_prefix(rt)
        h = run(rt, BatchPlan(50, slices=(
            RequestSlice(2, P, 16, 5, attach=(kv.slice(0, 2),), loads=(
                LoadIntent(host.slice(2, 4)),)),)))
        loaded = h.slices[0].loaded[0]
        h2 = run(rt, BatchPlan(51, slices=(RequestSlice(2, D, 21, 1, request=h.slices[0].request,
                                                        finishes=True),)))
        collect(rt, batches_done(50, 51))
        assert rt.dev_alloc.num_allocated == 4 + 2 + 2  # tree pages + loaded + own pages
        run(rt, BatchPlan(52, releases=(Release(h2.slices[0].request),),
                          frees=(kv, loaded, host)))
        rt.drain()
        assert rt.dev_alloc.num_allocated == 0 and rt.dev_alloc.num_free == 32
        assert rt.host_alloc.num_allocated == 0 and rt.host_alloc.num_free == 32
