"""Hybrid models on the torch runtime: SWA and MAMBA pools with real data.

A synthetic model with full, sliding-window and recurrent layers. Outputs depend on
what the pools hold, so reusing a cached prefix (FULL pages, the SWA pages of the window
before it, a MAMBA checkpoint copied on write) must give the outputs of computing the
prompt from scratch; and the cached checkpoint is never written.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_backend.runtime import TorchRuntime  # noqa: E402
from gpu_backend.shapes import ModelShape  # noqa: E402
from hicache.runtime.handles import Kind, Tier  # noqa: E402
from hicache.runtime.interface import (  # noqa: E402
    BatchCompletion,
    BatchPlan,
    Phase,
    Release,
    RequestSlice,
)

PAGE, WINDOW = 4, 8
SHAPE = ModelShape(num_layers=6, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
                   ffn_size=128, dtype_bytes=4, name="tiny-hybrid", sliding_window=WINDOW,
                   mamba_state_bytes=256,
                   layers=("mamba", "swa", "full", "mamba", "swa", "full"))


def runtime() -> TorchRuntime:
    return TorchRuntime(SHAPE, page_size=PAGE, host_pages={Kind.FULL: 0}, seed=3,
                        device_pages={Kind.FULL: 64, Kind.SWA: 64, Kind.MAMBA: 8})


def done(rt: TorchRuntime, bid: int) -> None:
    got = []
    while not any(isinstance(c, BatchCompletion) and c.batch_id == bid for c in got):
        more = rt.wait(20.0)
        assert more, f"batch {bid} did not complete"
        got += more


def prefill(rt: TorchRuntime, bid: int, rid: int, chunks: list[int], *, checkpoint_at=None,
            attach=(), start=0):  # noqa: ANN001, ANN201
    """Prefill ``rid`` chunk by chunk from ``start`` tokens (attached); returns the last
    prepared slice."""
    handle, ctx = None, start
    for i, n in enumerate(chunks):
        ckpt = checkpoint_at is not None and ctx + n == checkpoint_at
        s = RequestSlice(rid, Phase.PREFILL, ctx, n, request=handle,
                         attach=attach if i == 0 else (), checkpoint=ckpt)
        h = rt.prepare_batch(BatchPlan(bid + i, slices=(s,)))
        rt.execute_batch(h)
        done(rt, bid + i)
        handle, ctx = h.slices[0].request, ctx + n
        last = h.slices[0]
        if ckpt:
            cached = last
    return last, (cached if checkpoint_at is not None else None)


def test_swa_pages_behind_the_window_are_freed_as_the_request_advances():
    with runtime() as rt:
        swa = rt.allocs[(Tier.DEVICE, Kind.SWA)]
        free0 = swa.num_free
        last, _ = prefill(rt, 1, 1, [8] * 6)  # 48 tokens, window 8
        held = free0 - swa.num_free
        assert held <= WINDOW // PAGE + 8 // PAGE + 1  # the window and one chunk at most
        assert last.state and last.state[0].pool is Kind.SWA
        assert rt.info().swa_window == WINDOW and rt.info().mamba


def test_reusing_a_cached_prefix_gives_the_outputs_of_computing_it_from_scratch():
    prefix = 24  # of a 40-token prompt
    with runtime() as rt:  # from scratch, in chunks that cross the window
        prefill(rt, 1, 7, [8, 8, 8, 8, 8])
        scratch = rt.outputs[7].clone()
    with runtime() as rt:
        last, ckpt = prefill(rt, 1, 7, [8, 8, 8], checkpoint_at=prefix)
        kv = last.kv
        swa, mamba = (e for e in ckpt.state)  # the window ending at the prefix, the copy
        keep = (kv, swa, mamba)
        rt.execute_batch(rt.prepare_batch(BatchPlan(10, releases=(Release(last.request,
                                                                          keep=keep),))))
        done(rt, 10)
        slot = next(mamba.pages())
        cached = rt.state.state[slot].clone()
        # the same tokens again (rid 7): attach FULL, the SWA window and the checkpoint
        again, _ = prefill(rt, 20, 7, [8, 8], attach=keep, start=prefix)
        assert torch.allclose(rt.outputs[7], scratch, atol=1e-4, rtol=1e-4)
        assert torch.equal(rt.state.state[slot], cached)  # copy on write: never written
        private = rt.state.keeper.rows[again.request.slot_id].slot
        assert not torch.equal(rt.state.state[private], cached)  # the copy moved on


def test_reuse_without_the_checkpoint_would_not_match():
    """The test above can fail: attaching FULL and SWA but a zeroed recurrent state
    (no checkpoint copy) changes the outputs."""
    prompt_chunks = [8, 8, 8, 8, 8]
    with runtime() as rt:
        prefill(rt, 1, 7, prompt_chunks)
        scratch = rt.outputs[7].clone()
    with runtime() as rt:
        last, ckpt = prefill(rt, 1, 7, [8, 8, 8], checkpoint_at=24)
        swa = ckpt.state[0]
        keep = (last.kv, swa)
        rt.execute_batch(rt.prepare_batch(BatchPlan(10, releases=(Release(last.request,
                                                                          keep=keep),))))
        done(rt, 10)
        prefill(rt, 20, 7, [8, 8], attach=keep, start=24)
        assert not torch.allclose(rt.outputs[7], scratch, atol=1e-4, rtol=1e-4)
