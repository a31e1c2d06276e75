"""Soak: a simulated hour of multi-turn chat on L1+L2+L3 with every kind of fault, the tree
and pool invariants checked every N scheduler steps.

    python benchmarks/soak.py [--minutes 60] [--check-every 200] [--json]

Two replicas (cache-aware routing) share one Mooncake store. Prints the operations the
control plane performed (``tree_calls``: matches, inserts, locks, evictions, ...;
``node_updates``: the per-node changes they made: eviction-order touches, values in and
out, lock counts raised; ``tree_ops`` is both), scheduler steps, batches, the checks
made (``sim.invariants.check_replica``: :func:`hicache.tree.invariants.check_tree`, the
pools' free lists, budget vs pools), requests finished, what the faults did, wall and CPU
time and the process's peak memory (max RSS). Exits 1 when an invariant broke. The fault
schedule scales with ``--minutes`` (fractions of the run). The default suite runs a
reduced form (``tests/sim/test_soak.py``: two simulated minutes).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections import Counter
from typing import Any

from hicache.scenario import Scenario
from sim.driver import Replica, SimResult, simulate
from sim.invariants import check_replica

# calls into the tree, and the per-node updates they make (where each is counted)
TREE_CALLS = ("match", "insert", "split", "lock", "unlock", "evict_device", "evict_host",
              "remove", "reference_session", "close_session")
NODE_UPDATES = {"residency": ("touched", "put_value", "pop_value"),  # heap/LRU, values
                "locks": ("_raise", "lock_host")}  # a node's lock count raised
FAULTS = [  # (kind, start and end as fractions of the run, extra keys)
    ("l3_node_down", 0.15, 0.20, {"node": 1}),
    ("l3_store_down", 0.35, 0.36, {"lose_data": True}),
    ("l3_timeout", 0.50, 0.51, {}),
    ("link_slow", 0.60, 0.62, {"link": "pcie", "factor": 0.2}),
    ("host_pressure", 0.70, 0.72, {"bandwidth_factor": 0.2}),
    ("link_slow", 0.80, 0.82, {"link": "nic", "factor": 0.1}),
    ("link_down", 0.90, 0.905, {"link": "nic", "replica": 0}),
]


def soak_scenario(minutes: float, clients: int = 128, replicas: int = 2) -> Scenario:
    seconds = minutes * 60
    rounds = max(4, int(seconds / 20))  # ~20 s think time + service per round
    return Scenario.from_mapping({
        "name": "soak", "hardware": "h100-sxm", "model": "llama-3-8b",
        "cache": {"enable_hierarchical_cache": True, "page_size": 64, "device_tokens": 65536,
                  "hicache_ratio": 2, "hicache_storage_backend": "mooncake",
                  "hicache_write_policy": "write_through",
                  "hicache_storage_prefetch_policy": "timeout"},
        "scheduler": {"max_running_requests": 64}, "replicas": replicas,
        "router": "cache_aware",
        "workload": {"kind": "multiturn", "num_clients": clients, "num_rounds": rounds,
                     "request_length": 256, "output_length": 32, "request_rate": 4,
                     "max_parallel": clients, "think_time": 18.0},
        "run": {"max_sim_time": seconds, "fault_twin": False},
        "faults": [{"kind": k, "start": a * seconds, "end": b * seconds, **extra}
                   for k, a, b, extra in FAULTS],
    })


class Soak:
    """Counts tree operations (wrapping each replica's tree methods: calls, and the per-node
    updates of its residency and lock table) and checks the invariants every ``every``
    scheduler steps of a replica."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.calls: Counter = Counter()
        self.updates: Counter = Counter()
        self.steps = self.checks = 0
        self._wrapped: set[int] = set()

    def observe(self, i: int, rep: Replica) -> None:
        tree = rep.scheduler.tree
        if id(tree) not in self._wrapped:
            self._wrap(tree)
        self.steps += 1
        if self.steps % self.every == 0:
            check_replica(rep.scheduler, rep.runtime)
            self.checks += 1

    def _wrap(self, tree: Any) -> None:
        self._wrapped.add(id(tree))
        _count(tree, TREE_CALLS, self.calls)
        for part, names in NODE_UPDATES.items():
            _count(getattr(tree, part), names, self.updates)


def _count(obj: Any, names: tuple[str, ...], into: Counter) -> None:
    """Replace ``obj``'s methods ``names`` by wrappers that count their calls in ``into``
    (an instance attribute shadows the method, so the object's own calls count too)."""
    for name in names:
        fn = getattr(obj, name)

        def counted(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
            into[_name] += 1
            return _fn(*a, **kw)
        setattr(obj, name, counted)


def run(minutes: float, every: int, clients: int = 128) -> dict[str, Any]:
    sc = soak_scenario(minutes, clients)
    soak = Soak(every)
    wall, cpu = time.perf_counter(), time.process_time()
    res = simulate(sc, name="soak", progress=False, observe=soak.observe)
    for rep in res.replicas:  # and once more at the end
        check_replica(rep.scheduler, rep.runtime)
        soak.checks += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return _report(sc, res, soak, wall, cpu)


def _report(sc: Scenario, res: SimResult, soak: Soak, wall: float, cpu: float
            ) -> dict[str, Any]:
    finished = sum(1 for r in res.records if r["finish"] is not None)
    counts: Counter = Counter()
    for cost in (res.faults.costs if res.faults else ()):
        counts.update(cost.counts)
    batches = sum(1 for rep in res.replicas for r in rep.timeline.rows
                  if r.lane == "compute" and r.layer in (-1, 0))
    return {
        "simulated_s": round(res.sim_time, 1), "requests": res.requests,
        "finished": finished, "unfinished_at_cut": res.requests - finished,
        "tree_ops": sum(soak.calls.values()) + sum(soak.updates.values()),
        "tree_calls": dict(soak.calls), "node_updates": dict(soak.updates),
        "scheduler_steps": soak.steps, "batches": batches,
        "invariant_checks": soak.checks, "faults": len(sc.faults),
        "fault_effects": dict(counts), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="simulated minutes (60)")
    ap.add_argument("--check-every", type=int, default=200,
                    help="scheduler steps between invariant checks (200)")
    ap.add_argument("--clients", type=int, default=128,
                    help="chat clients over the two replicas (128)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    try:
        out = run(args.minutes, args.check_every, args.clients)
    except AssertionError as e:
        print(f"soak: INVARIANT BROKEN: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out))
        return 0
    for key, value in out.items():
        print(f"{key:22} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
