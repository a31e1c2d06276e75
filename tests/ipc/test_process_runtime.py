"""ProcessGPURuntime: the same decisions out of process, crossings per batch not per token,
and a runtime process that dies or hangs is noticed within a timeout.

The torch runtime (CPU, tiny shape) runs in a child process; the scheduler here holds
only handles. Scenarios are those of the decision-parity test (no completion races), so
in-process and out-of-process runs must log the same decisions.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gpu_backend.driver import run_scenario  # noqa: E402
from gpu_backend.process import torch_runtime  # noqa: E402
from gpu_backend.shapes import ModelShape  # noqa: E402
from hicache.runtime.handles import (
    Kind,
    StaleHandleError,  # noqa: E402
)
from hicache.runtime.interface import (  # noqa: E402
    BatchCompletion,
    BatchPlan,
    CapacityError,
    Phase,
    RequestSlice,
)
from ipc import ProcessGPURuntime, RuntimeProcessDied  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu_backend"))
from test_decision_parity import scenario  # noqa: E402

TORCH = partial(torch_runtime, shape=ModelShape.tiny(), page_size=4,
                device_pages={Kind.FULL: 16}, host_pages={Kind.FULL: 16})


def prefill(rid: int, tokens: int) -> RequestSlice:
    return RequestSlice(rid, Phase.PREFILL, 0, tokens)


def until_batch(rt, bid: int, patience: float = 20.0) -> list:  # noqa: ANN001
    got: list = []
    deadline = time.monotonic() + patience
    while not any(isinstance(c, BatchCompletion) and c.batch_id == bid for c in got):
        assert time.monotonic() < deadline, got
        got += rt.wait(1.0)
    return got


def test_decision_log_identical_in_and_out_of_process():
    """Evictions, loads and backups under L1 pressure: the same log, the same hits."""
    d = scenario(256, 1, 6, hicache_write_policy="write_through")
    local = run_scenario(d)
    remote = run_scenario(d, process=True)
    assert remote.decisions == local.decisions
    kinds = {row[1] for row in remote.decisions}
    assert {"evict", "load", "backup"} <= kinds  # the run exercised every kind of intent
    hits = [(r["rid"], r["device_hit"], r["host_hit"]) for r in remote.records]
    assert hits == [(r["rid"], r["device_hit"], r["host_hit"]) for r in local.records]
    assert all(r["finish"] is not None for r in remote.records)
    assert remote.extra["crossings"]["prepare_batch"] > 0
    assert remote.timeline.rows  # fetched from the runtime process before it closed


def _crossing_run(scale: int):
    d = scenario(8192, 4, 4)
    d["workload"].update(request_length=[16 * scale, 40 * scale],
                         output_length=[4 * scale, 8 * scale])
    d["scheduler"]["chunked_prefill_size"] = 1 << 20  # one prefill slice per request
    res = run_scenario(d, process=True)
    assert all(r["finish"] is not None for r in res.records)
    c = res.extra["crossings"]
    tokens = sum(r["prompt_tokens"] - r["cached_tokens"] + r["output_tokens"]
                 for r in res.records)
    return c, tokens


def test_crossings_per_batch_not_per_token():
    """Two crossings per plan (prepare, execute), a poll and a wait per driver wake-up
    (a batch's completion, a backup's, an arrival): a few crossings per plan at any
    length, while 8x longer prompts and outputs cost fewer crossings per token."""
    (small, t1), (large, t8) = _crossing_run(1), _crossing_run(8)
    for c in (small, large):
        plans = c["prepare_batch"]
        assert c["execute_batch"] == plans
        assert abs(c["poll"] - c["wait"]) <= 2  # one of each per wake-up
        assert sum(c.values()) <= 6 * plans  # ~4 here, at either length
    assert t8 >= 7 * t1
    per_token = [sum(c.values()) / t for c, t in ((small, t1), (large, t8))]
    assert per_token[1] < per_token[0]


def test_errors_keep_their_type_across_the_process():
    with ProcessGPURuntime(TORCH) as rt:
        with pytest.raises(CapacityError, match="needs"):
            rt.prepare_batch(BatchPlan(1, slices=(prefill(1, 17 * 4),)))
        h = rt.prepare_batch(BatchPlan(1, slices=(prefill(1, 8),)))
        rt.execute_batch(h)
        until_batch(rt, 1)
        with pytest.raises(ValueError, match="already executed"):
            rt.execute_batch(h)


class _DiesAt:
    """A TorchRuntime whose process exits abruptly at its ``n``-th prepare_batch."""

    def __init__(self, rt, n: int) -> None:  # noqa: ANN001
        self.rt, self.n = rt, n

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.rt, name)

    def prepare_batch(self, plan):  # noqa: ANN001, ANN201
        self.n -= 1
        if self.n <= 0:
            os._exit(3)
        return self.rt.prepare_batch(plan)


def dying_scenario_runtime(generation: int, **kw):  # noqa: ANN003, ANN201
    from gpu_backend.process import scenario_runtime

    return _DiesAt(scenario_runtime(generation, **kw), 6)


def hangs(generation: int):  # noqa: ANN201
    rt = TORCH(generation)
    rt.prepare_batch = lambda plan: time.sleep(3600)  # noqa: ARG005
    return rt


def test_a_killed_runtime_is_detected_and_a_restart_refuses_old_handles():
    with ProcessGPURuntime(TORCH, call_timeout_s=30.0) as rt:
        h = rt.prepare_batch(BatchPlan(1, slices=(prefill(1, 8),)))
        rt.execute_batch(h)
        until_batch(rt, 1)
        kv, req = h.slices[0].kv, h.slices[0].request
        os.kill(rt.pid, signal.SIGKILL)
        with pytest.raises(RuntimeProcessDied, match="signal 9"):
            rt.wait(10.0)  # detected by the exit signal, not by the call running out
        with pytest.raises(RuntimeProcessDied, match="restart"):
            rt.poll()  # every call fails until a restart
        rt.restart()
        assert rt.info().generation == kv.generation + 1
        with pytest.raises(StaleHandleError):
            rt.prepare_batch(BatchPlan(2, frees=(kv,)))
        with pytest.raises(StaleHandleError):
            rt.prepare_batch(BatchPlan(2, slices=(RequestSlice(1, Phase.DECODE, 8, 1,
                                                               request=req),)))
        fresh = rt.prepare_batch(BatchPlan(2, slices=(prefill(2, 8),)))  # serves again
        rt.execute_batch(fresh)
        until_batch(rt, 2)


def test_a_hung_runtime_is_killed_after_the_call_timeout():
    with ProcessGPURuntime(hangs, call_timeout_s=1.0) as rt:
        t = time.monotonic()
        with pytest.raises(RuntimeProcessDied, match="did not answer"):
            rt.prepare_batch(BatchPlan(1, slices=(prefill(1, 8),)))
        assert time.monotonic() - t >= 1.0  # killed at the call timeout, not before
        assert not rt.alive


def test_the_driver_fails_in_flight_requests_when_the_runtime_dies(monkeypatch):
    d = scenario(8192, 4, 4)
    d["workload"]["request_rate"] = math.inf
    import gpu_backend.driver as driver

    monkeypatch.setattr(driver, "scenario_runtime", dying_scenario_runtime)
    res = run_scenario(d, process=True, stall_timeout=20.0)
    assert res.unfinished, "the runtime died before the run could finish"
    assert all(why.startswith("runtime_died: the runtime process") for why in
               res.unfinished.values())
    assert "exit code 3" in next(iter(res.unfinished.values()))
    done = [r for r in res.records if r["finish"] is not None]
    assert len(done) + len(res.unfinished) == len(res.records)
