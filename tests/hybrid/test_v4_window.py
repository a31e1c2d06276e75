"""DeepSeek-V4's sliding window as the tree's SWA component (``hicache.model_parts``).

With ``scheduler.track_components`` a compressed model's window is cached in its own L1
pool, as in SGLang's unified radix tree: a device hit ends where the live window ends, so
a live session whose window LRU evicted loses its hit, and session-aware eviction, which
protects live sessions' windows, keeps it. Without tracking the window is per-request
state and both policies hit alike.
"""

from __future__ import annotations

import pytest
from hybrid_toys import PAGE, drive, hits, tiny_system

from hicache.runtime.handles import Kind
from hicache.schema.errors import InputError
from hicache.workload.request import Request
from sim.hardware.model import ModelPreset, load_model

WINDOW = 8  # tokens: 2 pages


def tiny_v4(**compression: object) -> ModelPreset:
    """Two compressed layers (a CSA-like 4 and an HCA-like 128), each with its window."""
    return load_model({
        "name": "tiny-v4", "num_layers": 2, "num_heads": 4, "num_kv_heads": 1,
        "head_dim": 16, "hidden_size": 64, "ffn_size": 128, "dtype_bytes": 2,
        "layers": "full", "sliding_window": WINDOW,
        "compression": {"ratios": [4, 128], "entry_bytes": 32, **compression}})


def session_returns(session_aware: bool, *, track: bool = True) -> list[int]:
    """Session A's first request, three sessionless requests that overflow the SWA pool
    (13 pages: each request reserves its 9 new pages, each leaves a 2-page window, so the
    third finds 7 free and evicts one window), then A's second request on the first's 32
    tokens. Returns every request's device hit."""
    env, rt, sched = tiny_system(tiny_v4(), full=256, swa=13, track=track,
                                 enable_session_aware_eviction=session_aware)
    prompt = list(range(32))
    reqs = [Request(0, 0.0, prompt, 3, session_id="A")]
    reqs += [Request(i, 10.0 * i, [1000 * i + t for t in range(32)], 3) for i in (1, 2, 3)]
    reqs.append(Request(4, 40.0, prompt + list(range(500, 516)), 3, session_id="A"))
    drive(env, rt, sched, reqs)
    return hits(sched)


def test_the_window_is_an_swa_pool_of_uncompressed_entries():
    m = tiny_v4()
    assert m.component_kinds == ("full", "full", "swa")
    assert m.swa_page_bytes(PAGE) == (PAGE * 32, PAGE * 32)
    env, rt, sched = tiny_system(m, swa=13)
    assert rt.info().swa_window == WINDOW
    assert rt.bytes_per_page[Kind.SWA] == 2 * PAGE * 32
    assert sched.tree.spec.get(Kind.SWA) is not None


def test_lru_loses_a_live_sessions_device_hit_with_its_window_session_aware_keeps_it():
    lru, session = session_returns(False), session_returns(True)
    assert lru[4] == 0  # FULL pages still on L1, but no live window ends on them
    assert session[4] == 32  # the protected window: the whole first request reused
    assert lru[:4] == session[:4] == [0, 0, 0, 0]


def test_without_tracking_the_window_is_request_state_and_both_policies_hit():
    assert session_returns(False, track=False)[4] == session_returns(True, track=False)[4] == 32


def test_the_swa_pool_share_follows_swa_full_tokens_ratio():
    assert tiny_v4(swa_full_tokens_ratio=0.1).swa_pool_tokens(880_000) == 88_000
    assert tiny_v4().swa_pool_tokens(880_000) == 880_000


@pytest.mark.parametrize("ratio", [0, 1.5, "a tenth"])
def test_a_bad_swa_ratio_is_refused_naming_the_field(ratio):
    with pytest.raises(InputError, match="swa_full_tokens_ratio"):
        tiny_v4(swa_full_tokens_ratio=ratio)


def test_a_prefix_shared_into_a_later_chunk_reuses_up_to_the_chunk_end_before_it():
    """SGLang caches each prefill chunk's end with its live window
    (``cache_unfinished_req``), so two prompts that share 80 tokens and diverge inside
    the second 64-token chunk reuse the first chunk (64 tokens). Caching the window at the
    prompt's end alone leaves no window on the shared path: the second would reuse 0."""
    env, rt, sched = tiny_system(tiny_v4(), full=256, swa=64)
    shared = list(range(80))
    reqs = [Request(0, 0.0, shared + list(range(900, 920)), 3),
            Request(1, 10.0, shared + list(range(700, 720)), 3),
            Request(2, 20.0, list(range(64)) + list(range(500, 536)), 3)]
    drive(env, rt, sched, reqs)
    assert hits(sched) == [0, 64, 64]
    assert sched.components.own[Kind.SWA] == 0  # every reservation returned
    assert not any(n.locks for n in sched.tree.nodes.values())  # chunk locks released
