"""One control plane, two runtimes: the same scenario and seed make the same decisions on
the TorchRuntime (CPU, tiny shape, wall clock) as in the simulator (SimPy, cost model).

Decisions depend on the *order* of events, not on their times, when the scenario leaves no
race between completions: every request arrives at t=0 (multiturn, request_rate inf, so
follow-ups arrive at their predecessor's finish), one batch in flight (overlap off), no L3
(L3 I/O speed decides when prefetches land relative to batches: a genuine race).
"""

from __future__ import annotations

import collections
import math

import pytest

from gpu_backend.driver import run_scenario
from sim.driver import simulate

TIERS = ("device_hit", "host_hit", "l3_hit", "cached_tokens", "prompt_tokens")


def scenario(device_tokens: int, max_running: int, clients: int, **cache) -> dict:
    return {
        "name": "parity", "seed": 7, "model": "llama-3-8b", "hardware": "h100-sxm",
        "cache": {"page_size": 4, "device_tokens": device_tokens,
                  "enable_hierarchical_cache": True, "hicache_ratio": 4.0,
                  "hicache_write_policy": "write_through",
                  "hicache_storage_prefetch_policy": "wait_complete",
                  "load_back_threshold": 4, **cache},
        "scheduler": {"overlap": False, "max_running_requests": max_running,
                      "chunked_prefill_size": 256},
        "workload": {"kind": "multiturn", "num_clients": clients, "num_rounds": 3,
                     "request_length": [16, 40], "output_length": [4, 8],
                     "request_rate": math.inf, "max_parallel": clients,
                     "system_prompt_length": 16},
    }


def kinds(decisions: list[tuple]) -> collections.Counter:
    return collections.Counter(d[1] for d in decisions)


def assert_same_run(d: dict) -> tuple[list[tuple], list[dict]]:
    sim = simulate(d)
    real = run_scenario(d)
    assert real.requests == sim.requests
    assert real.decisions == sim.decisions
    assert [{k: r[k] for k in ("rid", *TIERS)} for r in real.records] == \
        [{k: r[k] for k in ("rid", *TIERS)} for r in sim.records]
    assert all(r["finish"] >= r["first_token"] >= r["arrival"] for r in real.records)
    return real.decisions, real.records


def test_ample_capacity_same_decisions_and_hits():
    decisions, records = assert_same_run(scenario(8192, 8, 6))
    k = kinds(decisions)
    assert k["admit"] == k["finish"] == 18 and "evict" not in k
    assert sum(r["device_hit"] for r in records) > 0  # later rounds reuse their history


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_memory_pressure_same_evictions_and_loads(policy):
    """L1 holds ~2 conversations: admissions evict (demote to L2), later turns load back.
    One request in flight at a time keeps backups ahead of the evictions that need them."""
    decisions, records = assert_same_run(scenario(256, 1, 6, hicache_write_policy=policy))
    k = kinds(decisions)
    assert k["evict"] > 0 and k["load"] > 0 and k["backup"] > 0
    assert sum(r["host_hit"] for r in records) > 0


def test_torch_driver_runs_one_replica_only():
    d = scenario(8192, 8, 2)
    d["replicas"] = 2
    with pytest.raises(ValueError, match="exactly 1 replica"):
        run_scenario(d)


def test_mooncake_without_master_names_the_variable(monkeypatch):
    monkeypatch.delenv("MOONCAKE_MASTER", raising=False)
    d = scenario(8192, 8, 2, hicache_storage_backend="mooncake")
    with pytest.raises(ValueError, match="MOONCAKE_MASTER"):
        run_scenario(d)
