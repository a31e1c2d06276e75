"""PcieLink.l3_ceiling: a bound no total of L3 rates an allocation sets exceeds, whatever
the jobs, their split, the replicas moving and the NIC, store and host faults (what lets a
chain fold absorb an L3 change: sim.chain_fold.ChainFold.absorb). Checked on random
replicas, stores and job sets against the rates PcieLink.allocate sets."""

from __future__ import annotations

import random

import pytest
import simpy
from test_fluid_shift import copy_job, l3_job, perturb, replica, store_of

from sim.fluid import FluidJob


@pytest.mark.parametrize("seed", range(40))
def test_no_allocation_moves_l3_faster_than_the_ceiling(seed: int) -> None:
    rng = random.Random(seed)
    env = simpy.Environment()
    store = store_of(env, rng, duplex=rng.random() < 0.5)
    link, fluid, client = replica(env, store, rng)
    _, other, _ = replica(env, store, rng)  # another replica sharing the store
    for _ in range(20):
        perturb(rng, store, link, client, other, env)
        jobs: list[FluidJob] = [l3_job(env, rng) for _ in range(rng.randint(1, 9))]
        jobs += [copy_job(rng) for _ in range(rng.randint(0, 2))]
        rng.shuffle(jobs)
        fluid.jobs[:] = jobs  # (who is moving: what the store's share reads)
        fluid.kinds = {"l3": sum(j.kind == "l3" for j in jobs)}
        link.allocate(jobs)
        total = sum(j.rate for j in jobs if j.kind == "l3")
        assert total <= link.l3_ceiling()
