"""SharedGPURuntime: schedulers on one runtime, one allocator, one pool; isolated handles.

Unit level on a SimRuntime (its wait drives the SimPy clock), then whole runs: replicas
sharing one simulated runtime, and two schedulers sharing one torch runtime (CPU).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import simpy

from hicache.runtime.handles import Kind, StaleHandleError
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    Phase,
    Release,
    RequestSlice,
    TransferCompletion,
)
from hicache.runtime.shared import SharedGPURuntime
from hicache.runtime.sharing import SharingPolicy
from sim.driver import simulate
from sim.runtime import SimRuntime

PAGE = 4


@pytest.fixture
def two():
    env = simpy.Environment()
    rt = SimRuntime(env, profile="h100-sxm", model="llama-3-8b", page_size=PAGE,
                    device_pages={Kind.FULL: 32}, host_pages={Kind.FULL: 32}, runtime_id="gpu")
    shared = SharedGPURuntime(rt, SharingPolicy("static", 32, {"a": 16, "b": 16}),
                              free_pages=lambda: rt.device[Kind.FULL].free_count)
    return shared, shared.tenant("a"), shared.tenant("b")


def prefill(rid: int, tokens: int, **kw) -> RequestSlice:
    return RequestSlice(rid, Phase.PREFILL, 0, tokens, **kw)


def until(view, pred, tries: int = 50) -> list:  # noqa: ANN001
    got = []
    for _ in range(tries):
        if pred(got):
            return got
        got += view.wait(1.0)
    raise AssertionError(f"completions did not come: {got}")


def test_each_tenant_has_its_own_ids_and_gets_its_own_completions(two):
    shared, a, b = two
    assert a.info().runtime_id == "gpu/a" and a.info().device_pages[Kind.FULL] == 16
    assert a.info().host_pages[Kind.FULL] + b.info().host_pages[Kind.FULL] <= 32
    ha = a.prepare_batch(BatchPlan(1, slices=(prefill(1, 8),)))
    hb = b.prepare_batch(BatchPlan(1, slices=(prefill(1, 12),)))  # same ids, no clash
    a.execute_batch(ha)
    b.execute_batch(hb)
    assert ha.slices[0].kv.runtime_id == "gpu/a" and hb.slices[0].kv.runtime_id == "gpu/b"
    assert shared.placed("a") == 2 and shared.placed("b") == 3
    got_b = until(b, lambda g: any(isinstance(c, BatchCompletion) for c in g))
    got_a = until(a, lambda g: any(isinstance(c, BatchCompletion) for c in g))
    assert [c.batch_id for c in got_a] == [1] and [c.batch_id for c in got_b] == [1]
    kv = ha.slices[0].kv
    a.execute_batch(a.prepare_batch(BatchPlan(2, releases=(Release(ha.slices[0].request,
                                                                    keep=kv),),
                                              backups=(BackupIntent(kv, job_id=1),))))
    got = until(a, lambda g: any(isinstance(c, TransferCompletion) for c in g))
    backup = next(c for c in got if isinstance(c, TransferCompletion))
    assert backup.job_id == 1 and shared.placed("a") == 2  # kept pages stay a's


def test_one_tenant_cannot_use_another_tenants_handles_or_pages(two):
    shared, a, b = two
    ha = a.prepare_batch(BatchPlan(1, slices=(prefill(1, 8),)))
    a.execute_batch(ha)
    until(a, lambda g: bool(g))
    kv, req = ha.slices[0].kv, ha.slices[0].request
    with pytest.raises(StaleHandleError, match="gpu/a"):
        b.prepare_batch(BatchPlan(1, frees=(kv,)))  # a's extent, as it is
    with pytest.raises(StaleHandleError, match="belongs to tenant 'a'"):
        b.prepare_batch(BatchPlan(1, frees=(replace(kv, runtime_id="gpu/b"),)))  # forged
    with pytest.raises(StaleHandleError):
        b.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.DECODE, 8, 1,
                                                          request=req),)))
    with pytest.raises(StaleHandleError):
        b.execute_batch(ha)
    assert shared.placed("b") == 0  # nothing happened on b's behalf


SCENARIO = {
    "name": "shared", "seed": 3, "model": "llama-3-8b", "hardware": "h100-sxm",
    "cache": {"page_size": 64, "device_tokens": 64 * 96, "enable_hierarchical_cache": True,
              "hicache_ratio": 2},
    "scheduler": {"max_running_requests": 8},
    "replicas": 2, "router": "cache_aware",
    "workload": {"kind": "multiturn", "num_clients": 12, "num_rounds": 4,
                 "request_length": 256, "output_length": 16, "request_rate": 16,
                 "max_parallel": 12},
}


def watched_run(pool: str, monkeypatch) -> tuple:  # noqa: ANN001
    """Simulate with ``sharing.pool``; after every prepare check the pool's invariants."""
    seen: list[dict[str, int]] = []
    real = SharedGPURuntime.__init__

    def init(self, *args, **kw):  # noqa: ANN001, ANN002, ANN003
        real(self, *args, **kw)
        made.append(self)

    made: list[SharedGPURuntime] = []
    monkeypatch.setattr(SharedGPURuntime, "__init__", init)
    from hicache.runtime import shared as shared_mod

    prepare = shared_mod.TenantRuntime.prepare_batch

    def checked(self, plan):  # noqa: ANN001, ANN202
        h = prepare(self, plan)
        placed = {t: self.shared.placed(t) for t in self.shared.policy.share}
        assert sum(placed.values()) == self.shared.policy.total - self.shared.free_pages()
        seen.append(placed)
        return h

    monkeypatch.setattr(shared_mod.TenantRuntime, "prepare_batch", checked)
    d = copy.deepcopy(SCENARIO)
    d["sharing"] = {"pool": pool}
    res = simulate(d)
    assert not res.unfinished and not res.rejected
    return res, made[0], seen


def test_static_quotas_are_never_exceeded(monkeypatch):
    res, shared, seen = watched_run("static", monkeypatch)
    quota = shared.policy.share
    assert all(p[t] <= quota[t] for p in seen for t in quota)
    assert {r["replica"] for r in res.records} == {0, 1}


def test_a_shared_pool_lends_beyond_minimums_and_never_overcommits(monkeypatch):
    res, shared, seen = watched_run("shared", monkeypatch)
    pol = shared.policy
    assert all(sum(p.values()) <= pol.total for p in seen)
    # somebody borrowed: held more than its fair half of the pool at some point
    assert max(p[t] for p in seen for t in p) > pol.total // 2
    assert {r["replica"] for r in res.records} == {0, 1}


def test_two_schedulers_share_one_torch_runtime():
    pytest.importorskip("torch")
    from gpu_backend.driver import run_scenario

    d = {"name": "two", "seed": 7, "model": "llama-3-8b", "hardware": "h100-sxm",
         "cache": {"page_size": 4, "device_tokens": 512, "enable_hierarchical_cache": True,
                   "hicache_ratio": 4.0, "load_back_threshold": 4},
         "scheduler": {"overlap": False, "max_running_requests": 4},
         "replicas": 2, "sharing": {"pool": "shared", "fractions": [0.25, 0.25]},
         "workload": {"kind": "multiturn", "num_clients": 8, "num_rounds": 3,
                      "request_length": [16, 40], "output_length": [4, 8],
                      "request_rate": math.inf, "max_parallel": 8,
                      "system_prompt_length": 16}}
    res = run_scenario(d)
    assert res.extra["schedulers"] == 2 and res.extra["sharing"] == "shared"
    assert not res.unfinished and len(res.records) == 24
    assert {r["replica"] for r in res.records} == {0, 1}
    assert {row[0] for row in res.decisions} == {0, 1}  # both schedulers decided
    assert sum(res.extra["placed_pages"].values()) <= 128  # one pool of 512 / 4 pages
    assert sum(r["device_hit"] + r["host_hit"] for r in res.records) > 0
