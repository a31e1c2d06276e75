"""L3Store.share counts the clients moving L3 data as their jobs join and leave
(``movers``, kept by each client's fluid listener) where it asked every client
(``moving``): the same count, so the same share bit for bit, at every moment, whatever
transfers finish, time out or fail (faults)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import simpy
from simtoys import toy_profile

from hicache.tiers.l3_guard import RetryPolicy
from hicache.timeline import Timeline
from sim.fluid import FluidServer
from sim.hardware.profile import MooncakeSpec
from sim.l3 import L3Store
from sim.l3_client import L3Client
from sim.link import PcieLink


def asked(store: L3Store, group: str) -> float:
    """The share as first written: every client asked whether it moves."""
    active = sum(1 for c in store.clients if c.moving(group)) or 1
    return store.service_rate(group) / active


@pytest.mark.parametrize("seed", range(20))
def test_the_counted_share_is_the_asked_one_at_every_moment(seed: int) -> None:
    rng = random.Random(seed)
    env = simpy.Environment()
    store = L3Store.mooncake(env, MooncakeSpec(1e-3, 2e-4, 1e5, 2e7, 4e7, 2))
    policy = RetryPolicy(timeout_s=0.02, min_bytes_per_s=1e8, retries=1, backoff_s=0.003,
                         cooldown_s=0.01, cooldown_max_s=0.05)
    clients = []
    for _ in range(3):
        link = PcieLink(toy_profile())
        c = L3Client(env, store, FluidServer(env, link.allocate), Timeline(), policy=policy)
        link.l3 = c
        clients.append(c)
    seen: list[int] = []

    def op(c: L3Client) -> Any:
        yield env.timeout(rng.uniform(0, 0.2))
        keys = [f"k{rng.randrange(30)}" for _ in range(rng.randrange(1, 8))]
        if rng.random() < 0.5:
            yield from c.put(keys, rng.choice([1000, 20000]))
        else:
            yield from c.get(keys, 1000)

    def faults() -> Any:
        for f in range(6):
            yield env.timeout(rng.uniform(0, 0.04))
            which = rng.choice(["hang", "refuse"])
            getattr(store, which)(f, True)
            yield env.timeout(rng.uniform(0, 0.02))
            getattr(store, which)(f, False)

    def watch() -> Any:
        while True:
            yield env.timeout(rng.uniform(0, 0.002))
            assert store.movers == sum(1 for c in clients if c.moving("io"))
            assert store.share("io") == asked(store, "io")
            seen.append(store.movers)
            if env.now > 0.3:
                return

    for i in range(60):
        env.process(op(clients[i % 3]))
    env.process(faults())
    env.process(watch())
    env.run()
    assert store.movers == 0 and max(seen) >= 2  # (several moved at once, and all stopped)
