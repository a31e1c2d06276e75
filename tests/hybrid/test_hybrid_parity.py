"""One control plane, two runtimes, a hybrid model: the scheduler tracking FULL, SWA and
MAMBA (scheduler.track_components) makes the same decisions on the torch runtime (real
SWA pages and recurrent state, CPU) as in the simulator, under L1 pressure that evicts
each component and reuses prefixes across turns; with L2 too, where backups copy every
component and reuse loads FULL, the SWA window and the checkpoint back in one plan."""

from __future__ import annotations

import collections
import math

import pytest

pytest.importorskip("torch")

from gpu_backend.driver import run_scenario  # noqa: E402
from hicache.scenario import Scenario  # noqa: E402
from sim.driver import simulate  # noqa: E402

MODEL = {"name": "tiny-hybrid", "num_layers": 6, "num_heads": 4, "num_kv_heads": 2,
         "head_dim": 16, "hidden_size": 64, "ffn_size": 128, "dtype_bytes": 4,
         "layers": ["mamba", "swa", "full", "mamba", "swa", "full"], "sliding_window": 16,
         "mamba_state_bytes": 256}


def scenario(device_tokens: int, swa_tokens: int, mamba_slots: int, l2: bool = False
             ) -> Scenario:
    return Scenario.from_mapping({
        "name": "hybrid-parity", "seed": 5, "model": MODEL, "hardware": "h200-sxm",
        "cache": {"page_size": 4, "device_tokens": device_tokens,
                  "enable_hierarchical_cache": l2, "hicache_ratio": 3,
                  "hicache_write_policy": "write_through"},
        "scheduler": {"overlap": False, "max_running_requests": 2, "chunked_prefill_size": 32,
                      "track_components": True},
        "run": {"swa_tokens": swa_tokens, "mamba_slots": mamba_slots},
        "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 3,
                     "request_length": [24, 48], "output_length": [2, 6],
                     "request_rate": math.inf, "max_parallel": 4,
                     "system_prompt_length": 16}})


def test_hybrid_decisions_equal_on_both_runtimes_under_pressure():
    sc = scenario(device_tokens=320, swa_tokens=160, mamba_slots=8)
    sim = simulate(sc)
    real = run_scenario(sc, shape=sc.model)
    assert not sim.unfinished and not real.unfinished
    assert real.decisions == sim.decisions
    kinds = collections.Counter(d[1] for d in real.decisions)
    assert kinds["admit"] == kinds["finish"] == 12 and kinds["evict"] > 0
    hits = [r["device_hit"] for r in real.records]
    assert hits == [r["device_hit"] for r in sim.records] and sum(hits) > 0


def test_hybrid_l2_decisions_equal_on_both_runtimes():
    """L1+L2 (write_through): the same pressure, now demoting to L2 and loading back."""
    sc = scenario(device_tokens=320, swa_tokens=160, mamba_slots=8, l2=True)
    sim = simulate(sc)
    real = run_scenario(sc, shape=sc.model)
    assert not sim.unfinished and not real.unfinished
    assert real.decisions == sim.decisions
    kinds = collections.Counter(d[1] for d in real.decisions)
    assert kinds["admit"] == kinds["finish"] == 12
    assert kinds["backup"] > 0 and kinds["load"] > 0
    host = [r["host_hit"] for r in real.records]
    assert host == [r["host_hit"] for r in sim.records] and sum(host) > 0
