"""The link's allocation (sim.link.PcieLink.allocate, with sim.l3_client.L3Client.allocate
for ``l3`` jobs) sets bit for bit the rates of its plain form: one list per kind, ``sum``
over each direction, the L3 jobs split per group through a dict. The fast forms must keep
every float operation (a rate that differs in its last bit moves a finish, and every
result after it)."""

from __future__ import annotations

import math
import random

import simpy
from simtoys import toy_profile

from hicache.timeline import Timeline
from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import FileSpec, MooncakeSpec
from sim.l3 import L3Store
from sim.l3_client import L3Client, L3Job
from sim.link import PcieLink

GB = 1e9


def plain_l3(client: L3Client, jobs: list[L3Job]) -> None:
    """L3Client.allocate as first written: every store through the group dict."""
    groups: dict[str, list[L3Job]] = {}
    for job in jobs:
        groups.setdefault(client.store.group(job.direction), []).append(job)
    for group, members in groups.items():
        budget = client.store.share(group)
        if client.store.nic is not None:
            budget = min(budget, client.store.nic * client.nic_factor)
        each = budget / len(members)
        for job in members:
            job.rate = each if job.cap is None else min(each, job.cap)


def plain_allocate(link: PcieLink, jobs: list[FluidJob]) -> None:
    """PcieLink.allocate as first written (sim.link's module doc)."""
    h2d, d2h, l3_jobs, compute = [], [], [], []
    kernels_active = False
    for job in jobs:
        if job.kind == "compute":
            compute.append(job)
        elif job.kind in ("h2d", "d2h"):
            (h2d if job.kind == "h2d" else d2h).append(job)
            kernels_active = kernels_active or "kernel" in job.tags
        elif job.kind == "l3":
            l3_jobs.append(job)
    if not (l3_jobs or h2d or d2h):
        for job in compute:
            job.rate = 1.0
        return
    factor = link.factor
    totals = []
    for direction, group in (("h2d", h2d), ("d2h", d2h)):
        share = link.peak[direction] * factor / len(group) if group else 0.0
        for job in group:
            rate = share
            if "kernel" in job.tags:
                rate = min(rate, link.kernel_rate)
            if job.cap is not None:
                rate = min(rate, job.cap)
            job.rate = rate
        totals.append(sum(j.rate for j in group))
    scale = 1.0
    both = totals[0] > 0 and totals[1] > 0
    total = totals[0] + totals[1]
    bidirectional = link.bidirectional * factor
    if both and total > bidirectional:
        scale = bidirectional / total
    l3_total = 0.0
    if l3_jobs and link.l3 is not None:
        plain_l3(link.l3, l3_jobs)
        l3_total = sum(j.rate for j in l3_jobs)
    host = link.host * link.host_factor
    if total * scale + l3_total > host:
        if not l3_total:
            scale = host / total
        else:
            squeeze = host / (total * scale + l3_total)
            scale *= squeeze
            for job in l3_jobs:
                job.rate *= squeeze
    if scale < 1.0:
        for group in (h2d, d2h):
            for job in group:
                job.rate *= scale
    for job in compute:
        job.rate = 1.0 - link.slowdown if kernels_active else 1.0


def random_jobs(rng: random.Random, env: simpy.Environment) -> list[FluidJob]:
    jobs: list[FluidJob] = []
    for _ in range(rng.randint(0, 9)):
        kind = rng.choice(["h2d", "h2d", "d2h", "l3", "l3", "compute"])
        cap = rng.choice([None, None, rng.uniform(1, 80) * GB])
        if kind == "l3":
            job: FluidJob = L3Job(rng.uniform(1e3, 1e9), rng.choice(["read", "write"]),
                                  math.inf, env.event())
            job.cap = cap
        elif kind == "compute":
            job = FluidJob(rng.uniform(1e-5, 1e-2), kind)
        else:
            tags = frozenset({"kernel"}) if rng.random() < 0.6 else frozenset()
            job = FluidJob(rng.uniform(1e3, 1e9), kind, cap, tags)
        jobs.append(job)
    return jobs


def rig(rng: random.Random, duplex: bool) -> tuple[simpy.Environment, PcieLink]:
    env = simpy.Environment()
    link = PcieLink(toy_profile())
    link.host = rng.choice([link.host, rng.uniform(20, 120) * GB])  # binds or not
    if rng.random() < 0.3:
        link.slowed[0] = rng.uniform(0.1, 1.0)
    if rng.random() < 0.3:
        link.pressed[1] = rng.uniform(0.1, 1.0)
    if duplex:
        store = L3Store.mooncake(env, MooncakeSpec(1e-3, 0.0, 1e12, rng.uniform(1, 50) * GB,
                                                   rng.uniform(1, 50) * GB, 2))
    else:
        store = L3Store.file(env, FileSpec(rng.uniform(1, 30) * GB, rng.uniform(1, 30) * GB,
                                           1e-4, 1e12))
    client = L3Client(env, store, FluidServer(env, link.allocate), Timeline())
    if rng.random() < 0.3:
        client.nic_faults[0] = rng.uniform(0.1, 1.0)
    link.l3 = client
    return env, link


def test_the_link_sets_the_rates_of_its_plain_form_bit_for_bit() -> None:
    rng = random.Random(9)
    bound = 0
    for case in range(3000):
        env, link = rig(rng, duplex=case % 2 == 0)
        jobs = random_jobs(rng, env)
        link.l3.fluid.jobs.extend(j for j in jobs if j.kind == "l3")  # who is moving
        link.allocate(jobs)
        fast = [j.rate for j in jobs]
        for job in jobs:
            job.rate = -1.0
        plain_allocate(link, jobs)
        assert [repr(r) for r in fast] == [repr(j.rate) for j in jobs], case
        pcie = sum(j.rate for j in jobs if j.kind in ("h2d", "d2h"))
        host = link.host * link.host_factor
        bound += math.isclose(pcie + sum(j.rate for j in jobs if j.kind == "l3"), host)
    assert bound > 50  # cases where host memory binds (the squeeze) are among them
