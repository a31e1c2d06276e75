"""L3 faults on the torch runtime: corrupted pages are recomputed, a hung store costs a
bounded wait, and no wait of the runtime is unbounded."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest
import torch

import gpu_backend.driver as driver
from gpu_backend.completions import Outbox
from gpu_backend.l3 import FileL3
from gpu_backend.l3.checksum import HEADER
from gpu_backend.l3.resilient import RetryPolicy
from gpu_backend.l3_protocol import MemoryL3
from gpu_backend.pools import FenceTimeout, PageAllocator
from gpu_backend.streams import LaneEvent, Lanes
from hicache.runtime.handles import Kind
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    Phase,
    PrefetchIntent,
    RequestSlice,
    StoreIntent,
    TransferCompletion,
)
from hicache.timeline import Timeline
from tests.gpu_backend.builders import (
    batches_done,
    cached_prefix,
    collect,
    jobs_done,
    make_runtime,
    run,
)

FAST = RetryPolicy(timeout_s=0.3, retries=1, backoff_s=0.0, cooldown_s=30.0)


def transfers(got):
    return {c.job_id: c for c in got if isinstance(c, TransferCompletion)}


# -- corrupted pages: never used for attention ------------------------------------------

class BitRot(FileL3):
    """A file store whose disk flips one payload byte of every page it writes."""

    def batch_set(self, keys, values):
        rotten = []
        for v in values:
            b = bytearray(v)
            b[HEADER.size + len(b) // 3] ^= 0x40
            rotten.append(bytes(b))
        return super().batch_set(keys, rotten)


def _trace(path: Path) -> Path:
    """Request 0's prompt comes back as request 7's prefix after six others pushed it out
    of L1 and L2: request 7 can only reuse it from L3."""
    prompt = list(range(1000, 1040))
    lines = [{"arrival": 0.0, "tokens": prompt, "output_len": 2}]
    for i in range(1, 7):
        lines.append({"arrival": 0.15 * i, "tokens": list(range(2000 + 100 * i,
                                                                2040 + 100 * i)),
                      "output_len": 2})
    lines.append({"arrival": 1.2, "tokens": prompt + list(range(3000, 3008)), "output_len": 2})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _scenario(trace: Path, l3: bool) -> dict:
    cache = {"page_size": 4, "device_tokens": 96, "enable_hierarchical_cache": True,
             "hicache_ratio": 2.0, "hicache_write_policy": "write_through",
             "hicache_storage_prefetch_policy": "wait_complete"}
    if l3:
        cache["hicache_storage_backend"] = "file"
        cache["hicache_storage_backend_extra_config"] = {"prefetch_threshold": 8}
    return {"name": "l3faults", "seed": 3, "model": "llama-3-8b", "cache": cache,
            "scheduler": {"overlap": False, "max_running_requests": 1},
            "workload": {"kind": "trace", "path": str(trace), "format": "tokens"}}


def _run(monkeypatch: pytest.MonkeyPatch, d: dict, store: object | None):
    """run_scenario with ``store`` as its L3; returns (result, outputs by rid)."""
    built = {}
    build = driver.build_runtime

    def capture(*args, **kwargs):
        built["rt"] = build(*args, **kwargs)
        return built["rt"]

    monkeypatch.setattr(driver, "build_runtime", capture)
    monkeypatch.setattr(driver, "make_l3", lambda cache, directory: store)
    res = driver.run_scenario(d)
    return res, {rid: out.clone() for rid, out in built["rt"].outputs.items()}


def test_corrupted_l3_pages_are_recomputed_and_outputs_equal_the_no_cache_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    trace = _trace(tmp_path / "trace.jsonl")
    good, out_good = _run(monkeypatch, _scenario(trace, True), FileL3(tmp_path / "good"))
    with caplog.at_level(logging.WARNING, logger="hicache.l3"):
        rot, out_rot = _run(monkeypatch, _scenario(trace, True), BitRot(tmp_path / "rot"))
    said = [r.getMessage() for r in caplog.records]
    assert sum("failed verification" in m for m in said) == 1  # one warning, then counted
    assert any("l3_checksum_failures" in m for m in said)  # the run's summary line
    plain, out_plain = _run(monkeypatch, _scenario(trace, False), None)
    last = max(out_plain)
    l3_hit = {name: {r["rid"]: r["l3_hit"] for r in res.records}
              for name, res in (("good", good), ("rot", rot), ("plain", plain))}
    # the good store serves request 7's prefix from L3, which changes its output (the
    # synthetic model's KV depends on the request that computed it): the test can fail
    assert l3_hit["good"][last] > 0
    assert not torch.allclose(out_good[last], out_plain[last])
    # with rotten pages: checksum failures, no L3 tokens used, the very no-cache outputs
    assert rot.extra["l3_faults"]["l3_checksum_failures"] > 0
    assert l3_hit["rot"][last] == 0
    assert len(rot.records) == len(plain.records) == 8
    assert all(r["finish"] >= r["first_token"] for r in rot.records)
    assert sorted(out_rot) == sorted(out_plain)
    assert all(torch.equal(out_rot[rid], out_plain[rid]) for rid in out_plain)
    assert good.extra["l3_faults"] == dict.fromkeys(good.extra["l3_faults"], 0)


def test_a_prefetch_of_damaged_file_pages_fetches_only_the_good_prefix(tmp_path: Path) -> None:
    inner = FileL3(tmp_path)
    with make_runtime(l3=inner) as rt:
        _, host = cached_prefix(rt)
        keys = tuple(f"{i:064x}" for i in range(4))
        run(rt, BatchPlan(60, stores=(StoreIntent(host, keys, job_id=1),)))
        collect(rt, jobs_done(1))
        run(rt, BatchPlan(61, frees=(host,)))
        page2 = tmp_path / keys[2][:2] / keys[2]
        page2.write_bytes(b"\xff" * page2.stat().st_size)  # a page of 0xFF bytes
        run(rt, BatchPlan(62, prefetches=(PrefetchIntent(keys, 4, 1, job_id=2),)))
        pf = transfers(collect(rt, jobs_done(2)))[2]
        assert (pf.hit_pages, pf.pages) == (4, 2)  # listed 4, used only the 2 before it
        assert rt.l3_faults()["l3_checksum_failures"] == 1
        rt.drain()
        assert rt.host_alloc.num_allocated == 2 and not page2.exists()


def test_the_scenario_sets_the_l3_retry_policy_the_torch_runtime_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """run.l3_retry reaches the guard around the runtime's L3 client (the simulator's:
    tests/sim/test_sim_faults.py)."""
    d = _scenario(_trace(tmp_path / "trace.jsonl"), True)
    d["run"] = {"l3_retry": {"timeout_s": 0.7, "retries": 3, "cooldown_s": 2.0}}
    built = {}
    build = driver.build_runtime
    monkeypatch.setattr(driver, "build_runtime",
                        lambda *a, **kw: built.setdefault("rt", build(*a, **kw)))
    driver.run_scenario(d)
    policy = built["rt"].l3.inner.policy  # ChecksummedL3(ResilientL3(FileL3))
    assert (policy.timeout_s, policy.retries, policy.cooldown_s) == (0.7, 3, 2.0)
    assert policy.cooldown_max_s == RetryPolicy().cooldown_max_s


# -- a hung store: bounded, counted, and the run goes on --------------------------------

class Hung(MemoryL3):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.returned = 0  # exists calls that came back (the hang ended)

    def batch_exists(self, keys):
        self.release.wait(30)
        self.returned += 1
        return super().batch_exists(keys)

    batch_get = batch_set = None  # never reached: exists hangs first


def test_a_hung_store_delays_l3_jobs_by_a_bounded_time_and_nothing_else() -> None:
    store = Hung()
    try:
        with make_runtime(l3=store, l3_policy=FAST) as rt:
            _, host = cached_prefix(rt)
            run(rt, BatchPlan(70, stores=(StoreIntent(host, ("a", "b", "c", "d"), job_id=1),),
                              prefetches=(PrefetchIntent(("x", "y"), 2, 1, job_id=2),)))
            got = transfers(collect(rt, jobs_done(1, 2), timeout=20))
            # both jobs ended by the policy's timeouts and a skip while every hung call
            # was still blocked: not by the store coming back (no wall-clock bound here)
            assert store.returned == 0
            assert got[1].pages == 0 and got[2].pages == 0 and got[2].extent is None
            faults = rt.l3_faults()
            # exists timed out twice (store marked down); its set and the prefetch: skipped
            assert faults["l3_timeouts"] == 2 and faults["l3_skipped"] == 2
            rt.drain(5)
            assert rt.host_alloc.num_allocated == 4  # the prefetch's reservation came back
    finally:
        store.release.set()


def test_a_slow_l3_never_holds_up_device_allocation() -> None:
    """Pages freed from L1 wait only for the lanes that touch L1: a prefill that needs
    them runs while the l3 lane is still stuck in a store (before: after it)."""
    store = Hung()
    policy = RetryPolicy(timeout_s=1.0, retries=1, backoff_s=0.0, cooldown_s=30.0)
    try:
        with make_runtime(l3=store, l3_policy=policy, device_pages={Kind.FULL: 8}) as rt:
            kv, host = cached_prefix(rt)  # 4 of the 8 L1 pages, backed up to L2
            run(rt, BatchPlan(80, stores=(StoreIntent(host, ("a", "b", "c", "d"), 1),)))
            # all 8 L1 pages: 4 free, 4 freed by this very plan (fenced)
            run(rt, BatchPlan(81, frees=(kv,), slices=(RequestSlice(9, Phase.PREFILL, 0, 32),)))
            got = collect(rt, lambda g: batches_done(81)(g) and jobs_done(1)(g), timeout=20)
            [prefill] = [c for c in got if isinstance(c, BatchCompletion) and c.batch_id == 81]
            assert prefill.end < transfers(got)[1].end
            assert rt.l3_faults()["l3_timeouts"] == 2
    finally:
        store.release.set()


# -- no unbounded waits -----------------------------------------------------------------

class Never:
    lane = "l3"

    def is_done(self) -> bool:
        return False

    def wait(self, timeout: float | None = None) -> bool:
        time.sleep(min(timeout or 0.0, 0.05))
        return False


def test_alloc_behind_a_fence_that_never_completes_raises_naming_the_lane() -> None:
    alloc = PageAllocator(4, "L2", wait_timeout_s=0.1)
    alloc.free(alloc.alloc(4), [Never()])
    with pytest.raises(FenceTimeout, match=r"L2: 1 pages requested.*lanes \['l3'\]"):
        alloc.alloc(1)


def test_an_op_waiting_on_a_stuck_lane_fails_instead_of_hanging() -> None:
    lanes = Lanes("cpu", wait_timeout_s=0.2)
    try:
        stuck = LaneEvent("l3")  # never finished
        ev = lanes["compute"].submit(lambda: None, [stuck])
        assert ev.wait(10)
        assert isinstance(ev.error, TimeoutError) and "'l3'" in str(ev.error)
        assert lanes.drain(1)  # the failed op counts as done: nothing else waits on it
    finally:
        lanes.close()


def test_waiting_for_a_completion_without_a_timeout_is_bounded() -> None:
    with pytest.raises(TimeoutError, match="no completion"):
        Outbox(Timeline(), max_wait_s=0.1).take(None)
