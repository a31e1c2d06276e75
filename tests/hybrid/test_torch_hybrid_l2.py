"""Hybrid models with L2 on the torch runtime: SWA pages and MAMBA checkpoints backed up to
pinned host pools and loaded back (attach pieces on L2) byte for byte.

A prefix computed once, its FULL pages, SWA window and checkpoint backed up, their L1
copies freed; a second request reuses the prefix from L2 only: the data that lands on L1
equals what was backed up, and its outputs equal computing the prompt from scratch. The
same reuse with one corrupted L2 copy gives other outputs (the comparison can fail).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_torch_hybrid import PAGE, SHAPE, done, prefill  # noqa: E402

from gpu_backend.runtime import TorchRuntime  # noqa: E402
from hicache.runtime.handles import Kind  # noqa: E402
from hicache.runtime.interface import (  # noqa: E402
    BackupIntent,
    BatchPlan,
    LoadIntent,
    Phase,
    Release,
    RequestSlice,
    TransferCompletion,
)

PREFIX = 24  # of a 40-token prompt


def runtime() -> TorchRuntime:
    return TorchRuntime(SHAPE, page_size=PAGE, seed=3,
                        device_pages={Kind.FULL: 64, Kind.SWA: 64, Kind.MAMBA: 8},
                        host_pages={Kind.FULL: 64, Kind.SWA: 64, Kind.MAMBA: 8})


def scratch_output() -> torch.Tensor:
    with runtime() as rt:
        prefill(rt, 1, 7, [8, 8, 8, 8, 8])
        return rt.outputs[7].clone()


def cached_on_l2(rt: TorchRuntime):  # noqa: ANN201
    """Compute the prefix, keep FULL + window + checkpoint, back all three up, free L1."""
    last, ckpt = prefill(rt, 1, 7, [8, 8, 8], checkpoint_at=PREFIX)
    swa, mamba = ckpt.state
    keep = (last.kv, swa, mamba)
    rt.execute_batch(rt.prepare_batch(BatchPlan(10, releases=(Release(last.request, keep),))))
    done(rt, 10)
    saved = {Kind.SWA: rt.state.swa.kv[:, :, list(swa.pages())].clone(),
             Kind.MAMBA: rt.state.state[list(mamba.pages())].clone()}
    plan = BatchPlan(-1, backups=tuple(BackupIntent(e, j) for j, e in enumerate(keep, 1)))
    handle = rt.prepare_batch(plan)
    rt.execute_batch(handle)
    got: set[int] = set()
    while len(got) < 3:
        got |= {c.job_id for c in rt.wait(20.0) if isinstance(c, TransferCompletion)}
    rt.execute_batch(rt.prepare_batch(BatchPlan(-2, frees=keep)))  # L1 copies gone
    rt.drain(20.0)
    full, swa_host, mamba_host = handle.backups
    assert (swa_host.pool, mamba_host.pool) == (Kind.SWA, Kind.MAMBA)
    return full, swa_host, mamba_host, saved


def reuse_from_l2(rt: TorchRuntime, full, swa_host, mamba_host):  # noqa: ANN001, ANN201
    s = RequestSlice(7, Phase.PREFILL, PREFIX, 8, attach=(swa_host, mamba_host),
                     loads=(LoadIntent(full),))
    h = rt.prepare_batch(BatchPlan(20, slices=(s,)))
    rt.execute_batch(h)
    done(rt, 20)
    s2 = RequestSlice(7, Phase.PREFILL, PREFIX + 8, 8, request=h.slices[0].request)
    rt.execute_batch(rt.prepare_batch(BatchPlan(21, slices=(s2,))))
    done(rt, 21)
    return h.slices[0].loaded


def test_state_loaded_back_from_l2_is_byte_equal_and_gives_scratch_outputs():
    scratch = scratch_output()
    with runtime() as rt:
        full, swa_host, mamba_host, saved = cached_on_l2(rt)
        loaded = reuse_from_l2(rt, full, swa_host, mamba_host)
        assert [e.pool for e in loaded] == [Kind.FULL, Kind.SWA, Kind.MAMBA]
        assert all(e.tier.value == "L1" for e in loaded)
        assert torch.equal(rt.state.swa.kv[:, :, list(loaded[1].pages())], saved[Kind.SWA])
        slot = list(loaded[2].pages())
        assert torch.equal(rt.state.state[slot], saved[Kind.MAMBA])  # and never written (COW)
        assert torch.allclose(rt.outputs[7], scratch, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("corrupt", ["swa", "mamba"])
def test_a_wrong_l2_copy_changes_the_outputs(corrupt: str):
    scratch = scratch_output()
    with runtime() as rt:
        full, swa_host, mamba_host, _ = cached_on_l2(rt)
        if corrupt == "swa":
            rt.state_host.swa.data[:, :, list(swa_host.pages())] += 1.0
        else:
            rt.state_host.mamba[list(mamba_host.pages())] += 1.0
        reuse_from_l2(rt, full, swa_host, mamba_host)
        assert not torch.allclose(rt.outputs[7], scratch, atol=1e-4, rtol=1e-4)


def test_a_full_extent_on_l2_in_attach_is_refused():
    with runtime() as rt:
        full, _, _, _ = cached_on_l2(rt)
        s = RequestSlice(7, Phase.PREFILL, PREFIX, 8, attach=(full,))
        with pytest.raises(ValueError, match="FULL pages come back through loads"):
            rt.prepare_batch(BatchPlan(30, slices=(s,)))
