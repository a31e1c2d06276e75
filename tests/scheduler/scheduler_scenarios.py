"""Small scenarios and probes shared by the scheduler integration tests.

``scenario()`` is a multi-turn workload on a llama-3-8b / H100 model whose L1 (device) is
small enough that the radix tree must evict: 8 clients x 4 rounds, prompts of 1024 new
tokens per round (so a client's context grows to ~4k tokens), 32 output tokens, and
8192 device tokens (128 pages of 64). Variants override single keys.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from hicache.runtime.handles import Kind, Tier
from sim.driver import SimResult
from sim.runtime import SimRuntime

BASE: dict[str, Any] = {
    "name": "sched-it",
    "seed": 0,
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "cache": {
        "page_size": 64,
        "device_tokens": 8192,
        "enable_hierarchical_cache": True,
        "hicache_ratio": 3,
    },
    "workload": {
        "kind": "multiturn",
        "num_clients": 8,
        "num_rounds": 4,
        "request_length": 1024,
        "output_length": 32,
        "request_rate": 8,
        "max_parallel": 16,
    },
}

# name -> cache overrides: the tier configurations the tests compare
L1_ONLY = {"enable_hierarchical_cache": False}
L2_VARIANTS = {
    "L1+L2 write_through": {"hicache_write_policy": "write_through"},
    "L1+L2 write_through_selective": {"hicache_write_policy": "write_through_selective"},
    "L1+L2 write_back": {"hicache_write_policy": "write_back"},
}
L3_MOONCAKE = {"hicache_storage_backend": "mooncake"}


def scenario(*, cache: dict | None = None, workload: dict | None = None,
             scheduler: dict | None = None, run: dict | None = None,
             seed: int | None = None) -> dict[str, Any]:
    """A deep copy of :data:`BASE` with the given sections updated key by key."""
    d = copy.deepcopy(BASE)
    d["cache"].update(cache or {})
    d["workload"].update(workload or {})
    if scheduler:
        d["scheduler"] = dict(scheduler)
    if run:
        d["run"] = dict(run)
    if seed is not None:
        d["seed"] = seed
    return d


def decisions(result: SimResult, kind: str) -> list[tuple]:
    """Decisions of one kind, without the replica prefix: ('evict', node, tokens, how)..."""
    return [d[1:] for d in result.decisions if d[1] == kind]


def decision_counts(result: SimResult) -> Counter:
    return Counter(d[1] for d in result.decisions)


def page_balance(result: SimResult) -> list[dict[str, tuple[int, int, int]]]:
    """Per replica and tier: (runtime free pages, pages the scheduler's tree holds, capacity)."""
    out = []
    for rep in result.replicas:
        rt, tree = rep.runtime, rep.scheduler.tree
        out.append({
            "device": (rt.device[Kind.FULL].free_count, tree.held_pages(Tier.DEVICE),
                       rt.device_sizes[Kind.FULL]),
            "host": (rt.host[Kind.FULL].free_count, tree.held_pages(Tier.HOST),
                     rt.host_sizes[Kind.FULL]),
        })
    return out


class CountingRuntime:
    """A transparent proxy over a SimRuntime that counts boundary crossings.

    Counts ``prepare_batch``, ``execute_batch`` and ``poll`` calls, keeps every plan and
    the number of completions polls returned; everything else is delegated unchanged.
    """

    def __init__(self, runtime: SimRuntime) -> None:
        self._rt = runtime
        self.calls: Counter = Counter()
        self.plans: list = []
        self.completions = 0

    def prepare_batch(self, plan):  # noqa: ANN001, ANN201 - RuntimeInterface signature
        self.calls["prepare_batch"] += 1
        self.plans.append(plan)
        return self._rt.prepare_batch(plan)

    def execute_batch(self, handle) -> None:  # noqa: ANN001
        self.calls["execute_batch"] += 1
        self._rt.execute_batch(handle)

    def poll(self) -> list:
        self.calls["poll"] += 1
        out = self._rt.poll()
        self.completions += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rt, name)
