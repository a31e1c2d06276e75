"""Liveness on the torch runtime (CPU): requests that can never be served are rejected on
arrival instead of stalling the wall-clock loop, and a stall is reported at once with a
diagnosis (before: 120 s of waiting, then a traceback)."""

from __future__ import annotations

import math

import pytest

from gpu_backend.driver import run_scenario
from hicache.kvcache.manager import KVCacheManager


def scenario(**workload) -> dict:
    return {"name": "live", "seed": 1, "model": "llama-3-8b", "hardware": "h100-sxm",
            "cache": {"page_size": 4, "device_tokens": 256},
            "scheduler": {"max_running_requests": 4, "overlap": False},
            "workload": {"kind": "multiturn", "num_clients": 2, "num_rounds": 6,
                         "request_length": 40, "output_length": 4, "request_rate": math.inf,
                         "max_parallel": 2, **workload}}


def test_conversations_outgrowing_l1_are_rejected_and_the_rest_finish() -> None:
    res = run_scenario(scenario())
    finished = sum(r["finish"] is not None for r in res.records)
    assert res.requests == 12 and finished + len(res.rejected) == 12
    assert res.rejected and not res.unfinished and res.stall is None
    assert {r.split(":")[0] for r in res.rejected.values()} == {"exceeds_l1"}


def test_a_stall_is_reported_at_once_with_a_diagnosis(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(KVCacheManager, "admit", lambda self, st: False)
    # a stall timer of an hour: only the immediate detector can end this test
    res = run_scenario(scenario(num_rounds=1), stall_timeout=3600.0)
    assert set(res.unfinished) == {0, 1}
    assert res.stall is not None and res.stall.startswith("nothing can make progress")
    assert "queue head: request 0" in res.stall


def test_max_running_requests_zero_fails_before_running() -> None:
    d = scenario(num_rounds=1)
    d["scheduler"]["max_running_requests"] = 0
    with pytest.raises(ValueError, match="max_running_requests"):
        run_scenario(d)
