"""Write-back policies in both runtimes: the simulator's adaptive throttle learns the
interference its hardware model has (copy kernels slow compute by io_kernel.
compute_slowdown while they copy; copy-engine DMA does not), and the torch runtime paces
real chunks on its writeback lane."""

from __future__ import annotations

import pytest

from hicache.runtime.handles import Kind
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    Phase,
    Release,
    RequestSlice,
    TransferCompletion,
)
from hicache.scenario import load_scenario
from sim.driver import simulate
from sim.hardware.profile import load_profile

SMALL = ["workload.num_clients=16", "workload.num_rounds=2", "workload.request_rate=8",
         "workload.output_length=128", "cache.device_tokens=120000"]


def study(*overrides: str):  # noqa: ANN201
    sc = load_scenario("writeback_study").variant("no throttle")
    res = simulate(sc.with_overrides([*SMALL, *overrides]))
    assert not res.unfinished
    return res, res.replicas[0].runtime


@pytest.mark.parametrize("io, expect", [("kernel", "slowdown"), ("direct", 0.0)])
def test_the_adaptive_throttle_learns_the_modelled_interference(io, expect):
    res, rt = study("run.writeback.policy=adaptive", f"cache.hicache_io_backend={io}",
                    "run.writeback.target_slowdown=0.02")
    policy = rt.writeback.policy
    if expect == "slowdown":
        k = load_profile("h100-sxm").io_kernel.compute_slowdown
        assert policy.interference == pytest.approx(k, rel=0.2)
        assert policy.duty == pytest.approx(0.02 / policy.interference, rel=0.01)
    else:
        assert policy.interference < 0.005 and policy.duty == 1.0
    assert policy.chunks > 0


def test_every_policy_backs_up_the_same_bytes_and_adaptive_bounds_the_lag():
    moved, worst = {}, {}
    for policy in ("none", "static", "adaptive"):
        res, rt = study(f"run.writeback.policy={policy}", "run.writeback.max_lag_s=0.05",
                        "run.writeback.rate_bytes_per_s=2e9")
        moved[policy] = rt.bytes_moved["d2h"]
        last = {}
        for r in rt.timeline.rows:
            if r.lane == "d2h":
                last[r.batch] = max(last.get(r.batch, 0.0), r.end)
        worst[policy] = max(end - rt.writeback.ends[b] for b, end in last.items())
    assert moved["none"] == moved["static"] == moved["adaptive"] > 0
    # adaptive: within the bound plus what the copies themselves take unthrottled
    assert worst["none"] < worst["adaptive"] <= 0.05 + worst["none"]
    assert worst["static"] > 10 * worst["none"]  # 2 GB/s falls behind the writes


def test_the_torch_runtime_paces_chunks_on_its_writeback_lane():
    pytest.importorskip("torch")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu_backend"))
    from builders import collect, jobs_done, make_runtime, run

    rate = 4e6  # bytes/s: slow enough that the gaps dominate
    rt = make_runtime(device_pages={Kind.FULL: 64}, host_pages={Kind.FULL: 64},
                      writeback={"policy": "static", "rate_bytes_per_s": rate,
                                 "chunk_bytes": 1})  # one page a chunk
    with rt:
        h = run(rt, BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 16 * 4),)))
        kv = h.slices[0].kv
        run(rt, BatchPlan(2, releases=(Release(h.slices[0].request, keep=kv),),
                          backups=(BackupIntent(kv, job_id=5),)))
        got = collect(rt, jobs_done(5))
        page = rt.info().bytes_per_page[Kind.FULL]
        rows = sorted((r for r in rt.timeline.rows if r.op == "backup"),
                      key=lambda r: r.start)
        assert len(rows) == 16 and all(r.bytes == page for r in rows)
        span = rows[-1].start - rows[0].start  # 15 chunks' pacing at least
        assert span >= 0.95 * 15 * page / rate
        done = [c for c in got if isinstance(c, TransferCompletion)]
        assert done[0].pages == 16 and done[0].end >= rows[-1].end
        order = [type(c) for c in got]
        assert order.index(TransferCompletion) > order.index(BatchCompletion)
        assert rt.drain(10.0)
