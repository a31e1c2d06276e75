"""L3 as it is: contents and nodes (sim.l3), each replica's NIC, the store's shared service
rate, host-memory coupling with PCIe (sim.link) and the guarded calls (sim.l3_client)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import simpy
from simtoys import toy_profile

from hicache.tiers.l3_guard import RetryPolicy
from hicache.timeline import Timeline
from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import FileSpec, HardwareProfile, MooncakeSpec
from sim.l3 import L3Store
from sim.l3_client import L3Client
from sim.link import PcieLink

GB = 1e9


def mooncake(env: simpy.Environment, *, nic: float = 1 * GB, node: float = 10 * GB,
             nodes: int = 1, capacity: float = 1e12, rpc: float = 1e-3,
             latency: float = 0.0) -> L3Store:
    return L3Store.mooncake(env, MooncakeSpec(rpc, latency, capacity, nic, node, nodes))


def client(env: simpy.Environment, store: L3Store, profile: HardwareProfile | None = None,
           policy: RetryPolicy | None = None) -> L3Client:
    """One replica: its link allocation, fluid server and L3 client, wired as SimRuntime."""
    link = PcieLink(profile or toy_profile())
    fluid = FluidServer(env, link.allocate)
    c = L3Client(env, store, fluid, Timeline(), policy=policy)
    link.l3 = c
    return c


def run(env: simpy.Environment, gen: Any) -> tuple[Any, float]:
    box: dict[str, Any] = {}

    def proc() -> Any:
        box["value"] = yield from gen
        box["t"] = env.now
    env.process(proc())
    env.run()
    return box["value"], box["t"]


def test_exists_is_one_master_round_trip_and_reports_each_key(env) -> None:
    store = mooncake(env, rpc=2e-3)
    store.insert(["a", "b"], 10)
    found, t = run(env, client(env, store).exists(["a", "x", "b"]))
    assert found == [True, False, True] and t == pytest.approx(2e-3)


def test_put_writes_only_missing_keys_in_an_rpc_plus_latency_plus_bytes_over_the_nic(env) -> None:
    store = mooncake(env, nic=1 * GB, rpc=1e-3, latency=1e-4)
    store.insert(["a"], 1000)
    written, t = run(env, client(env, store).put(["a", "b", "c"], 1000))
    assert written == 2 and store.contains("c") and store.used == 3000
    assert t == pytest.approx(1e-3 + 1e-4 + 2000 / GB)


def test_capacity_evicts_least_recently_used_keys(env) -> None:
    store = mooncake(env, capacity=300)  # three 100-byte pages
    store.insert(["a", "b", "c"], 100)
    store.touch(["a"])  # a is now the most recent
    store.insert(["d"], 100)
    assert sorted(store.keys) == ["a", "c", "d"] and store.used == 300 and store.evictions == 1
    with pytest.raises(KeyError):
        store.touch(["b"])  # touch refreshes hits only: b was evicted


def test_one_replicas_reads_and_writes_share_its_nic(env) -> None:
    store = mooncake(env, nic=1 * GB, node=100 * GB, rpc=0.0)
    store.insert(["r"], int(1 * GB))
    c = client(env, store)
    ends: list[float] = []

    def read() -> Any:
        yield from c.get(["r"], int(1 * GB))
        ends.append(env.now)

    def write() -> Any:
        yield from c.put(["w"], int(1 * GB))
        ends.append(env.now)
    env.process(read())
    env.process(write())
    env.run()
    assert ends == [pytest.approx(2.0), pytest.approx(2.0)]  # 0.5 GB/s each, not 1 each


def test_replicas_share_the_store_and_one_finishing_speeds_up_the_other(env) -> None:
    # the store serves 1 GB/s in all; each NIC could take 1 GB/s alone
    store = mooncake(env, nic=1 * GB, node=0.5 * GB, nodes=2, rpc=0.0)
    store.insert(["a"], int(0.5 * GB))
    store.insert(["b"], int(1.5 * GB))
    a, b = client(env, store), client(env, store)
    (_, ta), (_, tb) = _both(env, a.get(["a"], int(0.5 * GB)), b.get(["b"], int(1.5 * GB)))
    assert ta == pytest.approx(1.0)  # 0.5 GB at half the store
    assert tb == pytest.approx(2.0)  # 0.5 GB by t=1, then 1 GB at its NIC's 1 GB/s


def _both(env: simpy.Environment, g1: Any, g2: Any) -> list[tuple[Any, float]]:
    out: list[Any] = [None, None]

    def proc(i: int, gen: Any) -> Any:
        v = yield from gen
        out[i] = (v, env.now)
    env.process(proc(0, g1))
    env.process(proc(1, g2))
    env.run()
    return out


def test_l3_and_pcie_traffic_share_host_memory_bandwidth(env) -> None:
    prof = toy_profile(host={"memory_bytes_per_s": 1.5 * GB},
                       pcie={"h2d_bytes_per_s": 1 * GB, "d2h_bytes_per_s": 1 * GB,
                             "bidirectional_bytes_per_s": 2 * GB, "call_overhead_s": 0.0,
                             "half_efficiency_bytes": 0, "copy_engines": 3})
    store = mooncake(env, nic=1 * GB, rpc=0.0)
    store.insert(["k"], int(1 * GB))
    c = client(env, store, prof)
    h2d = c.fluid.submit(FluidJob(1 * GB, "h2d"))
    _, t = run(env, c.get(["k"], int(1 * GB)))
    assert t == pytest.approx(1 / 0.75)  # 1 + 1 GB/s wanted, 1.5 allowed: 0.75 each
    assert h2d.processed and h2d.value is None


def test_pcie_alone_is_capped_by_host_memory_as_before(env) -> None:
    prof = toy_profile(host={"memory_bytes_per_s": 20e9})
    link = PcieLink(prof)
    jobs = [FluidJob(1, "h2d"), FluidJob(1, "d2h")]
    link.allocate(jobs)
    total = 50e9 + 40e9  # both peaks, above the 60e9 bidirectional cap and the host's
    assert [j.rate for j in jobs] == [50e9 * 20e9 / total, 40e9 * 20e9 / total]


def test_a_node_down_loses_its_keys_and_the_store_serves_one_node_less(env) -> None:
    store = mooncake(env, nodes=2, node=1 * GB, capacity=1000)
    store.insert([f"k{i}" for i in range(4)], 100)  # round-robin: k0, k2 on node 0
    lost = store.drop(fault=7, node=0)
    store.node_down(0, True)
    assert lost == 2 and sorted(store.keys) == ["k1", "k3"]
    assert store.truth_hits(["k1", "k2", "k3"]) == (3, 7)  # k2 was there: fault 7 lost it
    assert store.count_hits(["k1", "k2", "k3"]) == 1
    assert store.capacity == 500 and store.service_rate("io") == 1 * GB
    store.insert(["n0", "n1"], 100)
    assert all(store.keys[k][1] == 1 for k in ("n0", "n1"))  # only node 1 takes writes
    store.insert(["k2"], 100)
    assert "k2" not in store.lost  # written again: no longer lost


def test_a_refusing_store_answers_misses_then_is_skipped_then_probed_back(env) -> None:
    policy = RetryPolicy(retries=1, backoff_s=0.01, cooldown_s=1.0)
    store = mooncake(env, rpc=1e-3)
    store.insert(["a"], 10)
    c = client(env, store, policy=policy)
    store.refuse(0, True)
    found, t = run(env, c.exists(["a"]))
    assert found == [False] and t == pytest.approx(1e-3 + 0.01 + 1e-3)  # two attempts
    assert (c.counts["l3_errors"], c.counts["l3_retries"]) == (1, 1)
    store.refuse(0, False)
    found, _ = run(env, c.exists(["a"]))  # still cooling off: not even asked
    assert found == [False] and c.counts["l3_skipped"] == 1
    env.run(until=env.now + 1.0)
    found, _ = run(env, c.exists(["a"]))  # cooled off: a probe, which succeeds
    assert found == [True] and c.counts["l3_reconnects"] == 1


def test_a_hanging_store_times_calls_out_at_their_deadline(env) -> None:
    policy = RetryPolicy(timeout_s=0.5, min_bytes_per_s=1e6, retries=1, backoff_s=0.0)
    store = mooncake(env)
    store.insert(["a"], 1000)
    c = client(env, store, policy=policy)
    store.hang(0, True)
    got, t = run(env, c.get(["a"], 1000))
    assert got == 0 and c.counts["l3_timeouts"] == 2 and c.counts["l3_errors"] == 1
    assert t == pytest.approx(2 * (0.5 + 1000 / 1e6))
    assert [r.op for r in c.timeline.rows] == ["get_timeout", "get_timeout"]


def test_a_transfer_too_slow_for_its_deadline_is_abandoned(env) -> None:
    policy = RetryPolicy(timeout_s=0.1, min_bytes_per_s=1e9, retries=0)
    store = mooncake(env, nic=1e6, rpc=0.0)  # 1 MB/s NIC: 1 MB takes 1 s, deadline 0.101
    store.insert(["a"], int(1e6))
    c = client(env, store, policy=policy)
    got, t = run(env, c.get(["a"], int(1e6)))
    assert got == 0 and t == pytest.approx(0.1 + 1e-3) and not c.fluid.jobs


def test_healthy_transfers_leave_no_timer_behind(env) -> None:
    store = mooncake(env, rpc=0.0)
    store.insert(["a"], 1000)
    _, t = run(env, client(env, store).get(["a"], 1000))
    assert env.now == t and env.peek() == math.inf  # no deadline timer outlives the run


def test_transfers_leave_no_wake_up_on_the_store(env) -> None:
    store = mooncake(env, rpc=0.0)
    store.insert(["a", "b"], 1000)
    c = client(env, store)
    for keys in (["a"], ["b"], ["a", "b"]):
        got, _ = run(env, c.get(keys, 1000))
        assert got == len(keys)
    assert store.went_down.callbacks == [] and not c.fluid.jobs


def test_a_store_going_down_fails_transfers_under_way(env) -> None:
    store = mooncake(env, nic=1 * GB, rpc=0.0)
    store.insert(["a"], int(1 * GB))
    c = client(env, store, policy=RetryPolicy(retries=0))

    def outage() -> Any:
        yield env.timeout(0.25)
        store.refuse(3, True)
    env.process(outage())
    got, t = run(env, c.get(["a"], int(1 * GB)))
    assert got == 0 and t == pytest.approx(0.25) and c.blame == 3


def test_a_local_file_backend_serves_one_replica_but_mooncake_is_shared(env) -> None:
    spec = FileSpec(5e9, 2e9, 1e-4, 1e12)
    local = L3Store.file(env, spec)
    local.attach("r0")
    with pytest.raises(ValueError, match="not shared"):
        local.attach("r1")
    shared = mooncake(env)
    shared.attach("r0")
    shared.attach("r1")
    assert L3Store.file(env, spec, shared=True).shared


def test_file_reads_and_writes_have_their_own_rates(env) -> None:
    store = L3Store.file(env, FileSpec(2 * GB, 1 * GB, 0.0, 1e12))
    store.insert(["r"], int(2 * GB))
    c = client(env, store)
    (_, tr), (_, tw) = _both(env, c.get(["r"], int(2 * GB)), c.put(["w"], int(1 * GB)))
    assert tr == pytest.approx(1.0) and tw == pytest.approx(1.0)  # no NIC, no shared group


def test_an_old_profile_with_one_mooncake_rate_is_refused_with_the_new_keys() -> None:
    with pytest.raises(ValueError, match="nic_bytes_per_s"):
        toy_profile(l3={"mooncake": {"master_rpc_s": 1e-3, "bytes_per_s": 2e10,
                                     "latency_s": 1e-4, "capacity_bytes": 1e12}})
