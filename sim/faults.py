"""Faults in the simulator: the scenario's ``faults:`` applied in their windows, and what
each one cost.

    check_faults(scenario, profile)     before anything runs: replicas and nodes exist
    FaultInjector(env, faults, replicas, store)
        one SimPy process per fault: apply at ``start``, undo at ``end``; rows on lane
        ``fault`` (one per fault and replica it touches); a :class:`FaultLedger` that the
        L3 clients and prefetches charge
    fault_costs(ledger, records, twin)  summary.json's ``faults`` list (sim.fault_report)

Effects. The control plane has no fault path: a failed L3 call answers misses, and a short
prefetch already means "recompute the rest" (:mod:`sim.l3_client`):
- ``l3_node_down``: at start the node's keys are lost; the store holds and serves one node
  less (writes go to the others) until end, when the node rejoins empty;
- ``l3_store_down``: every L3 call fails at once and transfers under way fail; the guard
  retries once, then skips L3 for its cooldown; with ``lose_data`` the store comes back
  empty (a restarted Mooncake master loses every key: docs/SOURCES.md §5);
- ``l3_timeout``: the store answers nothing and serves at rate 0: calls hang to their
  deadline (``RetryPolicy``: 2 s + bytes at 100 MB/s), are retried once, then skipped;
- ``link_slow``: PCIe (both directions and their shared cap) or the replica's NIC runs at
  ``factor`` of its rate; ``link_down`` (NIC only): the replica's L3 calls hang;
- ``host_pressure``: host memory bandwidth x ``bandwidth_factor`` (PCIe and L3 squeezed).
Overlapping faults compose (factors multiply; the store refuses while any refusal lasts).
A fault on a part the variant lacks (an L3 fault without L3) changes nothing and says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

from hicache.scenario.faults import L3_KINDS
from sim.l3 import toggle

if TYPE_CHECKING:
    from hicache.runtime.interface import PrefetchIntent
    from hicache.scenario import Scenario
    from sim.hardware.profile import HardwareProfile
    from sim.l3 import L3Store
    from sim.runtime import SimRuntime


def check_faults(sc: Scenario, profile: HardwareProfile) -> None:
    """Raise ValueError naming ``faults[i].key`` for a replica or node that does not exist."""
    mooncake = profile.mooncake if sc.cache.hicache_storage_backend == "mooncake" else None
    for i, f in enumerate(sc.faults):
        replica = getattr(f, "replica", None)
        if replica is not None and replica >= sc.replicas:
            raise ValueError(f"{sc.source}: faults[{i}].replica: {replica}, but the scenario "
                             f"has {sc.replicas} replica(s) (0..{sc.replicas - 1})")
        node = getattr(f, "node", None)
        if node is not None and mooncake is not None and node >= mooncake.nodes:
            raise ValueError(f"{sc.source}: faults[{i}].node: {node}, but the mooncake L3 of "
                             f"profile {profile.name!r} has {mooncake.nodes} node(s) "
                             f"(0..{mooncake.nodes - 1})")


@dataclass
class FaultCost:
    """What one fault did, as the runtime saw it (counts; the twin run adds TTFT deltas)."""

    fault: Any
    applies: bool = True
    started: float | None = None
    ended: float | None = None
    counts: Counter = field(default_factory=Counter)
    jobs: dict = field(default_factory=dict)  # (runtime id, prefetch job) -> pages it wanted


class FaultLedger:
    """Per-fault counters (index = position in ``faults:``), charged by the L3 clients
    (failed, timed-out and skipped calls, writes lost), and the prefetches each fault
    touched (with the pages a store without faults would have given)."""

    def __init__(self, faults: Sequence[Any]) -> None:
        self.costs = [FaultCost(f) for f in faults]
        self.owners: dict[tuple[str, int], int] = {}  # (runtime id, prefetch job) -> rid

    def count(self, fault: int, counter: str, n: int = 1) -> None:
        self.costs[fault].counts[counter] += n

    def prefetched(self, rt: SimRuntime, pf: PrefetchIntent, truth: tuple[int, int | None],
                   trace: Sequence[int | None], fetched: int) -> None:
        """A prefetch ended with ``fetched`` pages; a store without faults held ``truth[0]``
        consecutive hits. A prefetch a fault touched (``trace``: the faults behind its
        failed, timed-out or skipped attempts, then those on its path while it ran, such
        as a slow NIC; or a key the fault lost) is charged to the first of them with the
        pages it should have brought (its request's shortfall: :mod:`sim.fault_report`)."""
        hits, lost_by = truth
        want = min(hits, pf.max_pages) if hits >= max(pf.min_hit_pages, 1) else 0
        culprit = next((b for b in trace if b is not None), None)
        if culprit is None and want > fetched:
            culprit = lost_by
        if culprit is not None and want:
            self.costs[culprit].jobs[(rt.runtime_id, pf.job_id)] = want

    def shortfalls(self, fault: int, records: Sequence[dict], page: int) -> dict[int, int]:
        """Requests ``fault`` touched -> tokens they recomputed that a store without faults
        would have given them (pages it should have fetched minus their L3 hits)."""
        by_rid = {r["rid"]: r for r in records}
        out: dict[int, int] = {}
        for job, want in self.costs[fault].jobs.items():
            rid = self.owners.get(job)
            if rid is None or rid not in by_rid:
                continue
            short = max(0, want * page - by_rid[rid]["l3_hit"])
            out[rid] = max(out.get(rid, 0), short)
        return out


class FaultInjector:
    def __init__(self, env: simpy.Environment, faults: Sequence[Any],
                 runtimes: Sequence[SimRuntime], store: L3Store | None) -> None:
        """``store``: the L3 the replicas use (None: this variant reaches no L3)."""
        self.env, self.faults, self.runtimes, self.store = env, list(faults), runtimes, store
        self.ledger = FaultLedger(self.faults)
        for rt in runtimes:
            if rt.l3_client is not None:
                rt.l3_client.ledger = self.ledger
        for i, f in enumerate(self.faults):
            self.ledger.costs[i].applies = self._applies(f)
            env.process(self._window(i, f))

    def _applies(self, f: Any) -> bool:
        """A fault on a part this run lacks does nothing: L3 faults need an L3 in use, a
        node a Mooncake store, a NIC a networked store (a local file L3 has none)."""
        store = self.store
        if f.kind == "l3_node_down":
            return store is not None and store.name == "mooncake"
        if getattr(f, "link", None) == "nic":
            return store is not None and store.nic is not None
        return f.kind not in L3_KINDS or store is not None

    def _targets(self, f: Any) -> list[SimRuntime]:
        replica = getattr(f, "replica", None)
        return list(self.runtimes) if replica is None else [self.runtimes[replica]]

    def _window(self, i: int, f: Any) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(f.start)
        cost = self.ledger.costs[i]
        cost.started = self.env.now
        if cost.applies:
            self._switch(i, f, True)
        yield self.env.timeout(f.end - f.start)
        if cost.applies:
            self._switch(i, f, False)
        cost.ended = self.env.now
        self._record(i, f, cost.started, cost.ended)

    def finish(self, now: float) -> None:
        """The run ended: windows still open get their lane rows, cut at ``now``."""
        for i, cost in enumerate(self.ledger.costs):
            if cost.started is not None and cost.ended is None:
                self._record(i, cost.fault, cost.started, now)

    def _record(self, i: int, f: Any, start: float, end: float) -> None:
        scope = (list(self.runtimes) if f.kind in L3_KINDS else self._targets(f))
        for rt in scope:
            rt.timeline.record("fault", f.kind, start, end, batch=i)

    def _switch(self, i: int, f: Any, on: bool) -> None:
        store, kind = self.store, f.kind
        if kind == "l3_node_down":
            assert store is not None
            if on:
                self.ledger.count(i, "keys_lost", store.drop(i, f.node))
            store.node_down(f.node, on)
        elif kind == "l3_store_down":
            assert store is not None
            store.refuse(i, on)
            if not on and f.lose_data:
                self.ledger.count(i, "keys_lost", store.drop(i))
        elif kind == "l3_timeout":
            assert store is not None
            store.hang(i, on)
        else:
            for rt in self._targets(f):
                self._switch_replica(i, f, rt, on)

    def _switch_replica(self, i: int, f: Any, rt: SimRuntime, on: bool) -> None:
        link, client = rt.link, rt.l3_client
        if f.kind == "host_pressure":
            _set(link.pressed, i, f.bandwidth_factor, on)
            if client is not None:
                toggle(client.host_faults, i, on)
        elif getattr(f, "link", None) == "pcie":
            _set(link.slowed, i, f.factor, on)
        elif client is not None:  # the NIC
            client.nic_fault(i, 0.0 if f.kind == "link_down" else f.factor, on)
        rt.fluid.replan()


def _set(active: dict[int, float], i: int, factor: float, on: bool) -> None:
    if on:
        active[i] = factor
    else:
        del active[i]
