"""No per-token crossing of the RuntimeInterface.

A *crossing* is one call from the control side into the runtime. The proxy
:class:`CountingRuntime` wraps the SimRuntime the driver builds and counts them.

What "nothing crosses per token" means, stated so it can be checked:

1. Two calls per batch: ``prepare_batch`` and ``execute_batch`` are called exactly once
   per plan; polls are per driver wake-up (at most one per completion or arrival, plus the
   first), never per token.
2. A plan names each request at most once, with token *counts*: a decode slice carries
   exactly 1 new token, a prefill slice a whole chunk; so a plan's size in slices is bounded
   by the requests running (``max_running_requests``), not by tokens.
3. Scaling prompt and output lengths 8x: prefill is unchunked here, so prefill batches
   stay bounded by the number of requests (one 8x longer prompt is still one slice).
   Decode batches are model steps; autoregression needs one step per output position, so
   their number may grow with the output length, but at most in proportion to it (one
   step per decode position of the longest-running batch, never one per token of every
   request). Hence tokens per crossing do not decrease when lengths grow 8x.
"""

from __future__ import annotations

import pytest
from scheduler_scenarios import CountingRuntime, scenario

import sim.driver as driver
from hicache.runtime.interface import Phase
from sim.runtime import SimRuntime

MAX_RUNNING = 8
SMALL = {"num_clients": 8, "num_rounds": 3, "request_length": 256, "output_length": 16,
         "request_rate": 4}


def _run(monkeypatch, scale: int) -> tuple[CountingRuntime, object]:  # noqa: ANN001
    made: list[CountingRuntime] = []

    def counting_runtime(*args, **kwargs) -> CountingRuntime:
        proxy = CountingRuntime(SimRuntime(*args, **kwargs))
        made.append(proxy)
        return proxy

    monkeypatch.setattr(driver, "SimRuntime", counting_runtime)
    d = scenario(
        workload={**SMALL, "request_length": SMALL["request_length"] * scale,
                  "output_length": SMALL["output_length"] * scale},
        cache={"device_tokens": 64 * 400},
        scheduler={"chunked_prefill_size": 1 << 20, "max_running_requests": MAX_RUNNING})
    result = driver.simulate(d)
    assert len(made) == 1 and all(r["finish"] is not None for r in result.records)
    return made[0], result


def _stats(proxy: CountingRuntime) -> dict:
    prefill = [p for p in proxy.plans if any(s.phase is Phase.PREFILL for s in p.slices)]
    decode = [p for p in proxy.plans
              if p.slices and all(s.phase is Phase.DECODE for s in p.slices)]
    return {
        "plans": len(proxy.plans),
        "prefill_batches": len(prefill),
        "decode_batches": len(decode),
        "tokens": sum(p.num_tokens for p in proxy.plans),
        "decode_tokens": sum(p.num_tokens for p in decode),
        "crossings": proxy.calls["prepare_batch"] + proxy.calls["execute_batch"],
    }


@pytest.fixture(scope="module")
def runs():
    mp = pytest.MonkeyPatch()
    try:
        return {scale: _run(mp, scale) for scale in (1, 8)}
    finally:
        mp.undo()


@pytest.mark.parametrize("scale", [1, 8])
def test_two_calls_per_batch_and_polls_per_wakeup(runs, scale):
    proxy, result = runs[scale]
    n = len(proxy.plans)
    assert n > 0
    assert proxy.calls["prepare_batch"] == proxy.calls["execute_batch"] == n
    assert proxy.calls["poll"] <= 1 + proxy.completions + result.requests


@pytest.mark.parametrize("scale", [1, 8])
def test_plans_carry_counts_bounded_by_running_requests(runs, scale):
    proxy, _ = runs[scale]
    for plan in proxy.plans:
        rids = [s.rid for s in plan.slices]
        assert len(rids) == len(set(rids)), f"batch {plan.batch_id} names a request twice"
        assert len(plan.slices) <= MAX_RUNNING
        for s in plan.slices:
            if s.phase is Phase.DECODE:
                assert s.new_tokens == 1
    # the 8x run does batch several requests per decode step (slices are shared steps)
    assert max(len(p.slices) for p in proxy.plans) > 1


def test_crossings_do_not_grow_per_token_when_lengths_grow_8x(runs):
    small, large = _stats(runs[1][0]), _stats(runs[8][0])
    requests = runs[1][1].requests
    assert runs[8][1].requests == requests
    # 8x the work crosses the boundary
    assert large["tokens"] >= 7 * small["tokens"]
    # prefill: one slice per request however long its prompt (unchunked here)
    assert small["prefill_batches"] <= requests
    assert large["prefill_batches"] <= requests
    # decode: batches are steps; they grow at most like the output length, and each
    # step carries every running request's token
    assert large["decode_batches"] <= 8 * small["decode_batches"]
    assert large["decode_tokens"] >= large["decode_batches"]
    # hence crossings per token do not grow (here they fall)
    assert (large["crossings"] / large["tokens"]) <= (small["crossings"] / small["tokens"])
    assert large["crossings"] < large["tokens"] / 4
