"""Replay and a serving run share one cache manager: on one trace they reuse the same
tokens from the same tier, request by request, wherever they are meant to agree.

They are meant to agree when compute is no factor and the two sizing rules are aligned:
- one request at a time: each arrives after the previous one finished and its copies
  (backups, stores, prefetches) completed, so no two requests compete for pages and no
  transfer races a batch (arrivals 1000 simulated seconds apart);
- ``output_len`` 1: the run caches no output, as replay does;
- no prompt is a whole number of pages: the run always recomputes at least the last
  token (as SGLang's scheduler), replay counts a fully cached prompt as a full hit;
- the run's L1 has one page more than replay's: a running request also holds the page of
  its partial last page (and its one output token), which replay never allocates, so
  with one more page both make room for the same number of cached pages;
- L3 prefetches use ``wait_complete``: replay's prefetch completes before admission by
  construction, the run's waits for it.
Under these conditions the per-request (L1, L2, L3) hits must be equal; the scenarios
below are sized so that every tier is used and L1 and L2 evict (asserted), so a manager
whose eviction, load-back, write policy or L3 path differed between the two would fail.
"""

from __future__ import annotations

import random

import pytest
import simpy

from hicache.config import CacheConfig
from hicache.replay.engine import L3Set, ReplayCache, replay
from hicache.runtime.handles import Kind
from hicache.scheduler.scheduler import Scheduler, SchedulerConfig
from hicache.workload.request import Request
from sim.hardware.profile import load_profile
from sim.l3 import L3Store
from sim.runtime import SimRuntime

PAGE = 16
DEVICE_PAGES = 40
HOST_PAGES = 56


def conversations(clients: int = 6, turns: int = 6, seed: int = 3) -> list[Request]:
    """Growing conversations with a shared system prompt, interleaved round-robin."""
    rng = random.Random(seed)
    system = list(range(1_000_000, 1_000_000 + 2 * PAGE))
    history = [list(system) for _ in range(clients)]
    out, rid = [], 0
    for turn in range(turns):
        for c in range(clients):
            new = rng.randrange(PAGE + 1, 3 * PAGE)
            while (len(history[c]) + new) % PAGE == 0:
                new += 1
            base = (c + 1) * 100_000 + turn * 1_000
            history[c] = history[c] + list(range(base, base + new))
            out.append(Request(rid, 1000.0 * rid, list(history[c]), 1, client=c, round=turn))
            rid += 1
    return out


def cache_config(**kw) -> CacheConfig:
    return CacheConfig(page_size=PAGE, device_tokens=DEVICE_PAGES * PAGE,
                       hicache_storage_prefetch_policy="wait_complete",
                       hicache_storage_backend_extra_config={"prefetch_threshold": PAGE},
                       **kw)


def run_hits(cfg: CacheConfig, requests: list[Request], l3: bool) -> list[tuple[int, ...]]:
    env = simpy.Environment()
    profile = load_profile("h100-sxm")
    store = L3Store.mooncake(env, profile.mooncake) if l3 else None
    host = HOST_PAGES if cfg.enable_hierarchical_cache else 0
    rt = SimRuntime(env, profile=profile, model="llama-3-8b", page_size=PAGE,
                    device_pages={Kind.FULL: DEVICE_PAGES + 1}, host_pages={Kind.FULL: host},
                    l3=store)
    sched = Scheduler(cfg, rt.info(), SchedulerConfig(max_running_requests=1, overlap=False,
                                                      l3=l3))
    pending, completions = list(requests), []
    while pending or not sched.idle:  # a driver needs nothing but the interface's wait
        arrivals = [r for r in pending if r.arrival <= env.now]
        del pending[:len(arrivals)]
        step = sched.step(env.now, arrivals, completions)
        while step.plans:
            for plan in step.plans:
                handle = rt.prepare_batch(plan)
                sched.prepared(handle)
                rt.execute_batch(handle)
            step = sched.step(env.now)
        assert pending or sched.awaiting_runtime or sched.idle, "stalled"
        completions = rt.wait(pending[0].arrival - env.now if pending else None)
    assert all(r["finish"] is not None for r in sched.records())
    kinds = {d.kind for d in sched.decisions}
    return [(r["device_hit"], r["host_hit"], r["l3_hit"]) for r in sched.records()], kinds


def replay_hits(cfg: CacheConfig, requests: list[Request], l3: bool) -> list[tuple[int, ...]]:
    cache = ReplayCache(cfg, l3=L3Set() if l3 else None, host_tokens=HOST_PAGES * PAGE)
    return [(r.device_hit, r.host_hit, r.l3_hit) for r in replay(requests, cache)]


@pytest.mark.parametrize(("name", "cache", "l3", "used"), [
    ("L1", {}, False, {"evict"}),
    ("L1+L2 write_through", {"enable_hierarchical_cache": True}, False,
     {"evict", "backup", "load"}),
    ("L1+L2 write_through_selective", {"enable_hierarchical_cache": True,
                                       "hicache_write_policy": "write_through_selective"},
     False, {"evict", "backup"}),
    ("L1+L2 write_back", {"enable_hierarchical_cache": True,
                          "hicache_write_policy": "write_back"}, False,
     {"evict", "backup", "load"}),
    ("L1+L2+L3", {"enable_hierarchical_cache": True, "hicache_storage_backend": "mooncake"},
     True, {"evict", "backup", "load", "prefetch"}),
    ("L1+L2+L3 write_back", {"enable_hierarchical_cache": True,
                             "hicache_storage_backend": "mooncake",
                             "hicache_write_policy": "write_back"},
     True, {"evict", "backup", "load", "prefetch"}),
])
def test_replay_and_run_reuse_the_same_tokens_per_request(name, cache, l3, used) -> None:
    requests = conversations()
    cfg = cache_config(**cache)
    ran, kinds = run_hits(cfg, requests, l3)
    assert used <= kinds, f"{name}: the trace does not exercise {used - kinds}"
    replayed = replay_hits(cfg, requests, l3)
    assert replayed == ran
    tiers = [sum(h[i] for h in ran) for i in range(3)]
    assert tiers[0] > 0 and (cache == {} or tiers[1] + tiers[2] > 0)
    if l3:
        assert tiers[2] > 0, "no request was served from L3"
