"""The shift fast path (sim.fluid ``shift``, :meth:`sim.link.PcieLink.shift_rate`): a copy
kernel joining or leaving a link it has alone re-plans only itself and the compute jobs,
with the very rates a re-allocation sets, the L3 split re-used while the store's epoch
holds. Checked against the plain allocation on random job sets and state changes, and a
two-replica run with and without the fast path finishing every job at the same floats."""

from __future__ import annotations

import math
import random

import simpy
from simtoys import KERNEL, layer_pipeline, toy_profile
from test_link_allocate import plain_allocate

from hicache.timeline import Timeline
from sim.driver import events_scheduled
from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import FileSpec, MooncakeSpec
from sim.l3 import L3Store
from sim.l3_client import L3Client, L3Job
from sim.link import PcieLink

GB = 1e9


def replica(env: simpy.Environment, store: L3Store, rng: random.Random, shift: bool = True
            ) -> tuple[PcieLink, FluidServer, L3Client]:
    """One replica wired as SimRuntime wires it (host memory binding or not)."""
    link = PcieLink(toy_profile())
    link.host = rng.choice([link.host, rng.uniform(30, 90) * GB])
    fluid = FluidServer(env, link.allocate, solo=link.solo_rate,
                        shift=link.shift_rate if shift else None)
    client = L3Client(env, store, fluid, Timeline())
    link.l3 = client
    return link, fluid, client


def store_of(env: simpy.Environment, rng: random.Random, duplex: bool) -> L3Store:
    if duplex:
        return L3Store.mooncake(env, MooncakeSpec(1e-3, 0.0, 1e12, rng.uniform(2, 40) * GB,
                                                  rng.uniform(2, 40) * GB, 2))
    return L3Store.file(env, FileSpec(rng.uniform(1, 30) * GB, rng.uniform(1, 30) * GB,
                                      1e-4, 1e12), shared=True)


def copy_job(rng: random.Random, kind: str | None = None) -> FluidJob:
    kind = kind or rng.choice(["h2d", "h2d", "d2h"])
    tags = KERNEL if rng.random() < 0.7 else frozenset()
    cap = rng.choice([None, None, None, rng.uniform(1, 60) * GB])
    return FluidJob(rng.uniform(1e3, 1e9), kind, cap, tags)


def l3_job(env: simpy.Environment, rng: random.Random) -> L3Job:
    return L3Job(rng.uniform(1e3, 1e9), rng.choice(["read", "write"]), math.inf, env.event())


def perturb(rng: random.Random, store: L3Store, link: PcieLink, client: L3Client,
            other: FluidServer, env: simpy.Environment) -> None:
    """Changes between the last allocation and the shift, through their usual ways (the
    allocation is not re-run: what the shift must notice or not depend on)."""
    for _ in range(rng.randint(0, 2)):
        change = rng.randrange(6)
        if change == 0:  # another replica starts moving (its own fluid server)
            other._add(l3_job(env, rng))
        elif change == 1 and other.jobs:  # or stops
            other._remove(other.jobs[-1])
        elif change == 2:
            client.nic_fault(7, rng.uniform(0.1, 1.0), 7 not in client.nic_faults)
        elif change == 3:
            store.hanging.append(3) if not store.hanging else store.hanging.clear()
            store.bump()  # as hang() does (without its re-plans)
        elif change == 4:
            store.down_nodes ^= {1}
            store.bump()
        else:  # host memory and PCIe factors are read afresh, not from the epoch
            link.pressed[2] = rng.uniform(0.05, 1.0)
            link.slowed[3] = rng.uniform(0.3, 1.0)


def test_the_shift_sets_the_rates_a_re_allocation_sets_bit_for_bit() -> None:
    rng = random.Random(10)
    taken = {"l3": 0, "none": 0}
    for case in range(4000):
        env = simpy.Environment()
        store = store_of(env, rng, duplex=case % 3 != 0)
        link, fluid, client = replica(env, store, rng)
        _, other, _ = replica(env, store, rng)
        if rng.random() < 0.3:
            other._add(l3_job(env, rng))
        for _ in range(rng.randint(0, 3)):
            fluid._add(FluidJob(rng.uniform(1e-5, 1e-2), "compute"))
        for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):
            fluid._add(l3_job(env, rng))
        if rng.random() < 0.5:
            fluid._add(copy_job(rng))
        if rng.random() < 0.2:
            fluid._add(copy_job(rng))
        rng.shuffle(fluid.jobs)
        link.allocate(fluid.jobs)
        perturb(rng, store, link, client, other, env)
        copies = [j for j in fluid.jobs if j.kind in ("h2d", "d2h")]
        joined = not copies or rng.random() < 0.5
        if joined:
            job = copy_job(rng)
            fluid._add(job)
        else:
            job = rng.choice(copies)
            fluid._remove(job)
        jobs = fluid.jobs
        before = [repr(j.rate) for j in jobs]
        rate = link.shift_rate(job, jobs, fluid.kinds, joined)
        if rate is None:
            assert [repr(j.rate) for j in jobs] == before, case  # nothing touched
            continue
        for j in jobs:
            if j.kind == "compute":
                j.rate = rate
        shifted = [repr(j.rate) for j in jobs]
        for j in jobs:
            j.rate = -1.0
        plain_allocate(link, jobs)
        assert shifted == [repr(j.rate) for j in jobs], case
        taken["l3" if fluid.kinds.get("l3") else "none"] += 1
    # the fast path is taken often, with L3 transfers under way and without
    assert taken["l3"] > 300 and taken["none"] > 300, taken


class CountingEnv(simpy.Environment):
    """Counts the events scheduled: the fast path re-plans the jobs a re-allocation
    re-plans, in its order, so the timers are the same too. SimPy numbers every event
    it queues with one counter (sim.streams.call_at queues timers without
    ``schedule``)."""

    @property
    def scheduled(self) -> int:
        """The events queued so far (read once, at the end: reading takes a number)."""
        return events_scheduled(self)


def two_replicas(seed: int, shift: bool) -> tuple[list[str], int, int]:
    """Two replicas on one store, each running a batch's layers as the chains run them
    (copy kernel ``i`` an overhead after kernel ``i - 1`` moved, promised to compute;
    compute layer ``i`` after layer ``i - 1`` and kernel ``i``) while L3 transfers with
    deadlines, d2h kernels and faults (NIC, host memory, the store hanging, a node
    down) come and go. Other replicas' transfers join without any re-plan here, so the
    store's epoch alone tells a replica its L3 split changed. Returns every finish and
    expiry (repr), the events scheduled and how often the fast path was taken."""
    rng = random.Random(seed)
    env = CountingEnv()
    store = store_of(env, rng, duplex=seed % 4 != 0)
    out: list[str] = []
    taken = [0]
    for r in range(2):
        link, fluid, client = replica(env, store, rng, shift)
        plain_shift = link.shift_rate

        def counted(*args, _shift=plain_shift) -> float | None:  # type: ignore[no-untyped-def]
            rate = _shift(*args)
            taken[0] += rate is not None
            return rate
        fluid._shift = counted if shift else None
        layers(env, rng, link, fluid, out, f"r{r}")
        for k in range(rng.randint(2, 7)):
            transfer(env, rng, fluid, out, f"r{r} l3 {k}")
        for k in range(rng.randint(0, 3)):
            other(env, rng, fluid, out, f"r{r} copy {k}")
        for fault in range(rng.randint(0, 3)):
            flip(env, rng, store, link, client, fluid, 10 * r + fault)
    env.run()
    return sorted(out), env.scheduled, taken[0]


def layers(env: simpy.Environment, rng: random.Random, link: PcieLink,
           fluid: FluidServer, out: list[str], name: str) -> None:
    n = 16
    overhead = 5e-6
    loads = [rng.uniform(1e5, 4e6) for _ in range(n)]
    work = [rng.uniform(2e-5, 2e-4) for _ in range(n)]
    _, launch = layer_pipeline(env, fluid, link.slowdown, loads, work, overhead, out,
                               f"{name} ")
    env.timeout(rng.uniform(0, 1e-3)).callbacks.append(lambda _ev: launch(0))


def transfer(env: simpy.Environment, rng: random.Random, fluid: FluidServer,
             out: list[str], name: str) -> None:
    at = rng.uniform(0, 3e-3)
    nbytes = rng.uniform(1e5, 5e7)

    def go(_ev: object) -> None:
        job = L3Job(nbytes, rng.choice(["read", "write"]), env.now + rng.uniform(1e-4, 2e-2),
                    env.event())
        fluid.submit(job).callbacks.append(lambda _e: out.append(f"{name} {env.now!r}"))
        job.expired.callbacks.append(lambda _e: out.append(f"{name} expired {env.now!r}"))
    env.timeout(at).callbacks.append(go)


def other(env: simpy.Environment, rng: random.Random, fluid: FluidServer, out: list[str],
          name: str) -> None:
    job = copy_job(rng)
    job.work = job.remaining = rng.uniform(1e5, 2e7)
    env.timeout(rng.uniform(0, 3e-3)).callbacks.append(
        lambda _ev: fluid.submit(job).callbacks.append(
            lambda _e: out.append(f"{name} {env.now!r}")))


def flip(env: simpy.Environment, rng: random.Random, store: L3Store, link: PcieLink,
         client: L3Client, fluid: FluidServer, i: int) -> None:
    """A fault on for a while, switched as sim.faults switches it."""
    kind = rng.choice(["nic", "host", "hang", "node"])
    start = rng.uniform(0, 2e-3)
    factor = rng.uniform(0.1, 0.9)

    def switch(on: bool) -> None:
        if kind == "nic":
            client.nic_fault(i, factor, on)
            fluid.replan()
        elif kind == "host":
            if on:
                link.pressed[i] = factor
            else:
                del link.pressed[i]
            fluid.replan()
        elif kind == "hang":
            store.hang(i, on)
        else:
            store.node_down(1, on) if (1 in store.down_nodes) != on else None
    env.timeout(start).callbacks.append(lambda _ev: switch(True))
    env.timeout(start + rng.uniform(1e-4, 1e-3)).callbacks.append(lambda _ev: switch(False))


def test_a_run_with_the_shift_is_the_run_without_it() -> None:
    taken = 0
    for seed in range(40):
        *plain, _ = two_replicas(seed, shift=False)
        *fast, n = two_replicas(seed, shift=True)
        assert fast == plain, seed  # every finish and expiry, and as many events
        taken += n
    assert taken > 1000  # the fast path carried most kernel joins and leaves
