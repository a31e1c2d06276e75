"""The L3 client's inline first attempt (sim.l3_client ``_clear``) and the one-run path of
``hicache.runtime.page_ids.runs_of`` are shortcuts: each must give exactly what the
general path gives (answers, times, counters, blame, timeline rows, store contents),
faults or not."""

from __future__ import annotations

import random
from typing import Any

import pytest
import simpy
from simtoys import toy_profile

from hicache.runtime.page_ids import runs_of
from hicache.tiers.l3_guard import RetryPolicy
from hicache.timeline import Timeline
from sim.fluid import FluidServer
from sim.hardware.profile import MooncakeSpec
from sim.l3 import L3Store
from sim.l3_client import L3Client
from sim.link import PcieLink


def _world(seed: int, inline: bool, held: bool = True, capacity: float = 1e6,
           kinds: tuple[str, ...] = ("exists", "get", "put"), space: int = 40) -> list[Any]:
    """Two replicas calling a Mooncake store at random times while faults come and go
    (refusing, hanging, a node down, a slow NIC); returns everything observable. A
    ``fetch`` queries its keys' leading hits, then gets them as a prefetch does, with the
    store's version before the query (``held``; else without: asked again)."""
    rng = random.Random(seed)
    env = simpy.Environment()
    store = L3Store.mooncake(env, MooncakeSpec(1e-3, 2e-4, capacity, 2e7, 4e7, 2))
    policy = RetryPolicy(timeout_s=0.02, min_bytes_per_s=1e8, retries=rng.choice([0, 1, 2]),
                         backoff_s=0.003, cooldown_s=0.01, cooldown_max_s=0.05)
    clients = []
    for _ in range(2):
        link = PcieLink(toy_profile())
        c = L3Client(env, store, FluidServer(env, link.allocate), Timeline(), policy=policy)
        link.l3 = c
        if not inline:  # the general path only: every attempt under the guard
            c._clear = lambda: False  # type: ignore[method-assign]
        clients.append(c)
    out: list[Any] = []

    def op(c: L3Client, i: int) -> Any:
        yield env.timeout(rng.uniform(0, 0.3))
        keys = [f"k{rng.randrange(space)}" for _ in range(rng.randrange(1, 6))]
        kind = rng.choice(kinds)
        trace: list[int | None] = []
        if kind == "fetch":
            mark = store.version if held else None
            n = yield from c.leading_hits(keys, trace)
            value = (n, (yield from c.get(keys[:n], 1000, trace, mark)) if n else 0)
        elif kind == "exists":
            value = yield from c.exists(keys, trace)
        elif kind == "get":
            value = yield from c.get(keys, 1000, trace)
        else:
            value = yield from c.put(keys, 1000)
        out.append((i, kind, value, env.now, trace, c.blame))

    def fault(f: int, which: str, on: bool) -> None:
        if which == "refuse":
            store.refuse(f, on)
        elif which == "hang":
            store.hang(f, on)
        elif which == "node":
            store.node_down(f % 2, on)
        else:
            clients[f % 2].nic_fault(f, 0.1, on)

    def faults() -> Any:
        for f in range(12):
            yield env.timeout(rng.uniform(0, 0.03))
            which = rng.choice(["refuse", "hang", "node", "nic"])
            fault(f, which, True)
            yield env.timeout(rng.uniform(0, 0.03))
            fault(f, which, False)

    for i in range(80):
        env.process(op(clients[i % 2], i))
    env.process(faults())
    env.run()
    out.sort(key=lambda r: r[0])
    rows = [[(r.op, r.start, r.end) for r in c.timeline.rows] for c in clients]
    return [out, [c.counts for c in clients], rows, list(store.keys.items()), store.evictions]


@pytest.mark.parametrize("seed", range(25))
def test_the_inline_first_attempt_is_the_guard_bit_for_bit(seed: int) -> None:
    inline, guarded = _world(seed, True), _world(seed, False)
    assert inline == guarded


FETCHES = ("fetch", "put")  # ten keys, a store of six: puts evict what fetches found


@pytest.mark.parametrize("seed", range(25))
def test_a_get_of_query_hits_is_the_get_that_asks_again(seed: int) -> None:
    """A get given the version since which its keys were hits counts them all while
    nothing left the store (L3Store.kept_since), else asks again: the same as a get that
    always asks, however evictions (puts into a store of six keys) and lost nodes fall
    between the query and the get."""
    assert (_world(seed, True, True, 6e3, FETCHES, 10)
            == _world(seed, True, False, 6e3, FETCHES, 10))


def test_a_key_evicted_between_query_and_get_is_not_fetched() -> None:
    """The query found a, b, c; a put evicts a before the get: the get fetches nothing
    (the leading key is gone), though every key was a hit at the version it was given."""
    env = simpy.Environment()
    store = L3Store.mooncake(env, MooncakeSpec(1e-3, 2e-4, 4e3, 2e7, 4e7, 1))  # 4 keys
    link = PcieLink(toy_profile())
    client = L3Client(env, store, FluidServer(env, link.allocate), Timeline())
    link.l3 = client
    store.insert(["a", "b", "c"], 1000)
    out: list[int] = []

    def fetch() -> Any:
        mark = store.version
        out.append((yield from client.leading_hits(["a", "b", "c"])))
        store.insert(["x", "y"], 1000)  # y's turn evicts the least recent: a
        out.append((yield from client.get(["a", "b", "c"], 1000, None, mark)))

    env.process(fetch())
    env.run()
    assert out == [3, 0] and "a" not in store.keys and store.bytes_read == 0


def test_the_worlds_do_fail_calls_in_every_way() -> None:
    """The comparison above is worth something: its faults fail attempts, first and
    retried, in every way the guard counts."""
    totals: dict[str, int] = {}
    for seed in range(25):
        for counts in _world(seed, True)[1]:
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
    for counter in ("l3_errors", "l3_timeouts", "l3_retries", "l3_skipped", "l3_reconnects"):
        assert totals[counter] > 0, counter


def test_runs_of_a_list_is_the_loops() -> None:
    """runs_of finds a list that is one ascending run without its loop (what an iterator
    still takes): the same runs either way."""
    rng = random.Random(7)
    for t in range(3000):
        n = rng.randrange(0, 50)
        if t % 3 == 0:
            pages = sorted(rng.sample(range(80), n))
        elif t % 3 == 1:
            pages = [rng.randrange(30) for _ in range(n)]
        else:  # runs handed out in any order, as a pool's free list gives them
            pages = []
            for _ in range(rng.randrange(0, 6)):
                s = rng.randrange(100)
                pages.extend(range(s, s + rng.randrange(1, 8)))
        assert runs_of(pages) == runs_of(iter(pages)), pages
    assert runs_of([4, 5, 6, 9, 10, 3]) == [(4, 3), (9, 2), (3, 1)]
    assert runs_of([7, 8, 9, 10]) == [(7, 4)]
    assert runs_of([5, 7, 6, 8]) == [(5, 1), (7, 1), (6, 1), (8, 1)]  # ends as one run's
