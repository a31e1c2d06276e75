"""Whole runs with both L3 key schemes (``cache.l3_key_scheme``: chain64, sha256) give the
same results, bit for bit: keys are only compared for equality, and chain64's are equal
iff SHA-256's are. A trace (block prompts: chain64 keys) and a multi-turn scenario
(conversations: the run's chain ids under chain64, SHA-256 under sha256) with L3; under
write_back the stores' keys come from the tree's nodes (NodeKeys), under write_through
from the requests' keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache.scenario import load_scenario
from sim.driver import SimResult, simulate
from tests.shared_data import CONVERSATION_TRACE, skip_reason

ROOT = Path(__file__).resolve().parents[2]
TRACE = CONVERSATION_TRACE

CASES = [
    ("mooncake_trace.yaml", ["workload.max_requests=300", "cache.device_tokens=60000",
                             "cache.hicache_write_policy=write_back"]),
    ("mooncake_trace.yaml", ["workload.max_requests=400", "run.layerwise=true",
                             "cache.device_tokens=60000", "cache.hicache_ratio=1.5"]),
    ("multiturn_tiers.yaml", ["workload.num_clients=16", "workload.num_rounds=6",
                              "run.layerwise=true", "cache.device_tokens=20000",
                              "cache.hicache_ratio=1.5"]),
]


def _scenario(name: str, sets: list[str], scheme: str):  # noqa: ANN202 - a Scenario
    if name.startswith("mooncake"):
        if not TRACE.exists():
            pytest.skip(skip_reason(TRACE))
        sets = [*sets, f"workload.path={TRACE}"]
    sc = load_scenario(ROOT / "scenarios" / name, [*sets, f"cache.l3_key_scheme={scheme}"])
    return dict(sc.expand())["L1+L2+L3"]


def _outcome(res: SimResult) -> tuple:
    stores = {id(rep.runtime.l3_client.store): rep.runtime.l3_client.store
              for rep in res.replicas if rep.runtime.l3_client is not None}
    return (repr(res.records), repr(res.decisions), repr(res.sim_time),
            [repr(sorted(rep.timeline.as_tuples())) for rep in res.replicas],
            [(len(s.keys), s.used, s.bytes_read, s.bytes_written, s.evictions)
             for s in stores.values()])


@pytest.mark.parametrize(("name", "sets"), CASES)
def test_both_key_schemes_simulate_the_same_run(name: str, sets: list[str]) -> None:
    runs, keys = {}, {}
    for scheme in ("sha256", "chain64"):
        res = simulate(_scenario(name, sets, scheme), name=scheme, progress=False)
        assert sum(r["l3_hit"] for r in res.records) > 0  # prefetches found stored keys
        runs[scheme] = _outcome(res)
        store = next(rep.runtime.l3_client.store for rep in res.replicas)
        keys[scheme] = {type(k) for k in store.keys}
    assert runs["chain64"] == runs["sha256"]
    assert runs["sha256"][4][0][0] > 0  # L3 held pages: the keys were used
    assert keys["sha256"] == {str}
    # block prompts key by chain64; conversations by the run's chain ids too
    # (sim.driver.CHAIN_IDS_BYTES; SHA-256 without them)
    assert keys["chain64"] == {int}


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_both_key_schemes_replay_the_same_trace(policy: str) -> None:
    from hicache.config import CacheConfig
    from hicache.replay.engine import L3Set, ReplayCache, replay
    from hicache.workload.traces import load_trace

    if not TRACE.exists():
        pytest.skip(skip_reason(TRACE))
    out = {}
    for scheme in ("sha256", "chain64"):
        cfg = CacheConfig(page_size=64, device_tokens=60000, enable_hierarchical_cache=True,
                          hicache_write_policy=policy, l3_key_scheme=scheme)
        l3 = L3Set(20000)  # LRU: keys leave as well as enter
        records = replay(load_trace(TRACE, max_requests=400), ReplayCache(
            cfg, l3=l3, host_tokens=60000))
        out[scheme] = (records, len(l3))
    assert out["chain64"] == out["sha256"]
    assert sum(r.l3_hit for r in out["sha256"][0]) > 0


def _small_l3(sets: list[str], capacity: float) -> list[str]:
    """``sets`` with the Mooncake store shrunk to ``capacity`` bytes (it evicts)."""
    import json

    from hicache.schema.yamlio import read_yaml

    hw = dict(read_yaml(ROOT / "scenarios/hardware/h100-sxm.yaml").data)
    hw["l3"] = dict(hw["l3"])
    hw["l3"]["mooncake"] = dict(hw["l3"]["mooncake"], capacity_bytes=capacity)
    return [*sets, "hardware=" + json.dumps(hw)]


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_chain_ids_simulate_the_same_run_as_chain64(policy: str, monkeypatch) -> None:
    """A run keys chain64 pages by one ChainIds (sim.driver.CHAIN_IDS): twin runs with and
    without them, the store evicting, give the same results; with them the store's keys
    are the run's dense ids."""
    sets = _small_l3(["workload.max_requests=300", "cache.device_tokens=60000",
                      f"cache.hicache_write_policy={policy}"], 1e11)
    keys = {on: (made is not None, all(0 <= k < len(made) for k in store.keys)
                 if made is not None else None)
            for on, (store, made) in _twin_stores(monkeypatch, "CHAIN_IDS",
                                                  "mooncake_trace.yaml", sets).items()}
    assert keys == {False: (False, None), True: (True, True)}


def _twin_stores(monkeypatch, flag: str, yaml: str, sets: list[str]) -> dict:
    """Run ``yaml`` with ``sim.driver.<flag>`` off and on; the results must be the same
    and the store must evict and hit; each run's store and chain ids, by the flag."""
    import sim.driver

    runs, stores = {}, {}
    for on in (False, True):
        monkeypatch.setattr(sim.driver, flag, on)
        res = simulate(_scenario(yaml, sets, "chain64"), name="x", progress=False)
        runs[on] = _outcome(res)
        store = res.replicas[0].runtime.l3_client.store
        assert store.evictions > 0 and sum(r["l3_hit"] for r in res.records) > 0
        stores[on] = (store, res.replicas[0].scheduler.kv.chain_ids)
    assert runs[True] == runs[False]
    return stores


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_chain_ids_of_conversations_simulate_the_same_run_as_sha256(policy: str,
                                                                    monkeypatch) -> None:
    """Conversations' bytes page keys take the run's ChainIds too (sim.driver.
    CHAIN_IDS_BYTES): twin runs with them and with their SHA-256 chains, the store
    evicting, give the same results; with them the store's keys are the run's dense ids,
    without them hex SHA-256 keys."""
    sets = _small_l3(["workload.num_clients=16", "workload.num_rounds=6",
                      "run.layerwise=true", "cache.device_tokens=20000",
                      "cache.hicache_ratio=1.5", f"cache.hicache_write_policy={policy}"], 3e9)
    stores = _twin_stores(monkeypatch, "CHAIN_IDS_BYTES", "multiturn_tiers.yaml", sets)
    assert all(made is not None for _, made in stores.values())
    assert {on: {type(k) for k in store.keys} for on, (store, _) in stores.items()} == {
        False: {str}, True: {int}}
    store, made = stores[True]
    assert all(0 <= k < len(made) for k in store.keys)
