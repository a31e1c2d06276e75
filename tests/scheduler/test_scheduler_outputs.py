"""A finished turn's output KV stays in the tree, so the next turn reuses it (as SGLang
caches a finished request's prompt and output)."""

from __future__ import annotations

from scheduler_scenarios import scenario

from sim.driver import simulate


def test_the_next_turn_reuses_the_previous_turns_output_pages() -> None:
    # one client, plenty of L1: turn 1's prompt = turn 0's prompt (512) + output (300) + 512
    d = scenario(cache={"device_tokens": 100_000, "enable_hierarchical_cache": False},
                 workload={"num_clients": 1, "num_rounds": 2, "request_length": 512,
                           "output_length": 300, "max_parallel": 1})
    first, second = simulate(d).records
    kv_tokens = first["prompt_tokens"] + first["output_tokens"] - 1  # the last token has no KV
    assert second["device_hit"] == kv_tokens // 64 * 64 == 768  # 12 pages, 4 of them output
    assert second["device_hit"] > first["prompt_tokens"]
