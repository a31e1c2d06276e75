"""The same contracts on a CUDA device: streams, events, pinned memory (skipped on CPU)."""

from __future__ import annotations

import pytest
import torch

from gpu_backend.shapes import ModelShape
from hicache.runtime.interface import BatchPlan, LoadIntent, Phase, Release, RequestSlice
from tests.gpu_backend.builders import batches_done, cached_prefix, collect, make_runtime, run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("io_backend", ["direct", "kernel"])
def test_cuda_restore_is_bit_identical_and_layerwise(layout, io_backend):
    with make_runtime(device="cuda", mem_layout=layout, io_backend=io_backend) as rt:
        assert rt.host.data.is_pinned() and rt.dev.kv.is_cuda
        kv, host = cached_prefix(rt)
        outs = []
        for i, s in enumerate([RequestSlice(2, Phase.PREFILL, 16, 3, attach=(kv,)),
                               RequestSlice(2, Phase.PREFILL, 16, 3, loads=(LoadIntent(host),))]):
            h = run(rt, BatchPlan(10 + i, slices=(s,)))
            collect(rt, batches_done(10 + i))
            outs.append(rt.outputs[2].float().cpu())
            run(rt, BatchPlan(20 + i, releases=(Release(h.slices[0].request),)))
        loaded = h.slices[0].loaded[0]
        for a, b in zip(kv.pages(), loaded.pages(), strict=True):
            assert torch.equal(rt.dev.page_tensor(a), rt.dev.page_tensor(b))
        assert torch.equal(outs[0], outs[1])
        loads = [r for r in rt.timeline.rows if r.lane == "h2d" and r.batch == 11]
        comp = [r for r in rt.timeline.rows
                if r.lane == "compute" and r.batch == 11 and r.layer >= 0]
        assert len(loads) == len(comp) == rt.shape.num_layers
        for c in comp:
            assert c.start >= loads[c.layer].end - 1e-6
        assert all(r.end >= r.start >= 0 for r in rt.timeline.rows)


def test_cuda_calibration_measures_the_host_side_and_device_time():
    """The quick grid on the tiny shape: issuing copies and launching layers cost the
    driver thread time on CUDA (0 on CPU), the device lanes do not wait for the host, and
    the in-situ ratios are ratios of real times."""
    from gpu_backend.calibrate import calibrate

    prof, _ = calibrate(ModelShape.tiny(), "cuda", page_size=16, quick=True)
    cpu = prof["cpu"]
    assert cpu["copy_issue_s"] > 0 and cpu["layer_launch_s"] > 0 and cpu["op_submit_s"] > 0
    assert "interpreter" not in cpu  # CUDA streams run what the driver issued at once
    ins = prof["calibrated"]["in_situ"]
    assert 0.2 < ins["compute_scale"] < 5 and ins["batches"] >= 10
    assert all(r[3] > 0 for r in prof["calibrated"]["compute"]["prefill"])
