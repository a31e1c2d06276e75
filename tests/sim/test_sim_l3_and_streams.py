"""L3 stores (query batches, LRU capacity, sharing) and stream ordering."""

from __future__ import annotations

import pytest
import simpy

from sim.hardware.profile import FileSpec, MooncakeSpec
from sim.l3 import L3Store
from sim.streams import Stream

MOONCAKE = MooncakeSpec(master_rpc_s=1e-3, bytes_per_s=10e9, latency_s=1e-4, capacity_bytes=300)


def drive(env: simpy.Environment, gen):
    box = {}

    def proc():
        box["value"] = yield from gen
        box["t"] = env.now
    env.process(proc())
    env.run()
    return box["value"], box["t"]


def test_query_goes_in_batches_and_stops_at_the_first_miss(env) -> None:
    l3 = L3Store.mooncake(env, MOONCAKE)
    l3.keys.update({f"k{i}": 1 for i in range(5)})
    keys = [f"k{i}" for i in range(5)] + ["gap", "k9", "k10", "k11"]
    trips, t = drive(env, l3.query(keys, batch=2))
    assert [h for _, _, h in trips] == [2, 2, 1]  # third batch (k4, gap) misses: stop
    assert t == pytest.approx(3 * MOONCAKE.master_rpc_s)  # one master RPC per batch


def test_writes_skip_present_keys_and_take_latency_plus_bytes_over_bandwidth(env) -> None:
    l3 = L3Store.mooncake(env, MooncakeSpec(1e-3, 1e9, 1e-4, 1e12))
    l3.keys["a"] = 1000
    l3.used = 1000
    written, t = drive(env, l3.write(["a", "b", "c"], 1000, None))
    assert written == 2
    assert t == pytest.approx(1e-4 + 2000 / 1e9)
    assert l3.bytes_written == 2000 and l3.contains("c")


def test_capacity_evicts_least_recently_used_keys(env) -> None:
    l3 = L3Store.mooncake(env, MOONCAKE)  # 300 bytes: three 100-byte pages
    drive(env, l3.write(["a", "b", "c"], 100, None))
    drive(env, l3.read(["a"], 100, None))  # a is now the most recent
    drive(env, l3.write(["d"], 100, None))
    assert sorted(l3.keys) == ["a", "c", "d"] and l3.used == 300 and l3.evictions == 1


def test_concurrent_transfers_share_bandwidth(env) -> None:
    l3 = L3Store.mooncake(env, MooncakeSpec(0.0, 1e9, 0.0, 1e12))
    ends = []

    def reader():
        yield from l3.read([], 1e9, None)
        ends.append(env.now)
    env.process(reader())
    env.process(reader())
    env.run()
    assert ends == [pytest.approx(2.0), pytest.approx(2.0)]


def test_a_local_file_backend_serves_one_replica_but_mooncake_is_shared(env) -> None:
    spec = FileSpec(5e9, 2e9, 1e-4, 1e12)
    local = L3Store.file(env, spec)
    local.attach("r0")
    with pytest.raises(ValueError, match="not shared"):
        local.attach("r1")
    shared = L3Store.mooncake(env, MOONCAKE)
    shared.attach("r0")
    shared.attach("r1")
    assert L3Store.file(env, spec, shared=True).shared


def test_stream_ops_run_in_order_and_can_wait_on_other_streams(env) -> None:
    compute, d2h = Stream(env, "compute"), Stream(env, "d2h")
    log = []

    def op(name, dt):
        def body():
            yield env.timeout(dt)
            log.append((name, env.now))
        return body
    c1 = compute.submit(op("c1", 3))
    compute.submit(op("c2", 1))
    d2h.submit(op("backup", 1), waits=(c1,))  # like cudaStreamWaitEvent on c1's event
    env.run()
    assert log == [("c1", 3), ("c2", 4), ("backup", 4)]
    assert compute.idle() and d2h.idle()
