"""The cache manager's policies do what they say: write_back reaches L3, every L2 copy is
stored under the keys its tokens hash to, the selective policy waits for the second hit,
replay goes in arrival order."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hicache.cli import main
from hicache.config import CacheConfig, ConfigError
from hicache.kvcache.decisions import Admit, Backup, Evict
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.plans import PlanBuilder
from hicache.replay.engine import L3Set, ReplayCache, replay
from hicache.runtime.handles import Tier
from hicache.runtime.interface import RuntimeInfo, TransferCompletion, TransferKind
from hicache.scenario import load_scenario
from hicache.tiers.hashing import page_hashes
from hicache.tree.allocator import PageAllocator
from hicache.tree.components import Kind
from hicache.tree.options import TreeOptions
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4


def req(rid: int, tokens: list[int], arrival: float | None = None) -> Request:
    return Request(rid, float(rid) if arrival is None else arrival, tokens, 1)


def tiered(policy: str, device_pages: int = 4, host_pages: int = 8) -> ReplayCache:
    cfg = CacheConfig(page_size=PAGE, device_tokens=device_pages * PAGE,
                      enable_hierarchical_cache=True, hicache_write_policy=policy,
                      hicache_storage_backend="mooncake",
                      hicache_storage_backend_extra_config={"prefetch_threshold": PAGE})
    return ReplayCache(cfg, l3=L3Set(), host_tokens=host_pages * PAGE)


def test_write_back_stores_what_l1_evicts_under_the_keys_of_its_tokens() -> None:
    a, b, c = ([k * 100 + i for i in range(4 * PAGE)] for k in range(1, 4))
    cache = tiered("write_back", device_pages=4, host_pages=4)  # each tier holds 1 prompt
    recs = replay([req(0, a), req(1, b), req(2, c), req(3, a)], cache)
    assert set(page_hashes(a, PAGE)) <= set(cache.l3._keys)  # evicted, backed up, stored
    assert cache.exec.l3_written_pages == 8  # a and b, backed up as they left L1
    # a's L2 copy made room for b's; a comes back from L3
    assert (recs[3].device_hit, recs[3].host_hit, recs[3].l3_hit) == (0, 0, 4 * PAGE)


def test_write_back_deletes_what_l2_has_no_room_to_back_up() -> None:
    """Admitting a (fetched into a full L2, pinned for it) evicts c from L1; c's backup
    finds no L2 room, so c is deleted (SGLang's drop_subtree_no_host) instead of blocking
    the admission forever."""
    a, b, c = ([k * 100 + i for i in range(4 * PAGE)] for k in range(1, 4))
    cache = tiered("write_back", device_pages=4, host_pages=4)
    replay([req(0, a), req(1, b), req(2, c)], cache)
    before = len(cache.kv.decisions)
    (rec,) = replay([req(3, a)], cache)
    assert rec.l3_hit == 4 * PAGE
    after = [d.row() for d in cache.kv.decisions[before:]]
    assert ("evict", 3, 4 * PAGE, "delete") in after and not any(
        r[0] == "backup" for r in after)


def test_write_through_selective_backs_up_on_the_second_hit_only() -> None:
    a = list(range(2 * PAGE))
    cache = tiered("write_through_selective", device_pages=8)
    replay([req(0, a)], cache)
    assert not any(n.on_host for n in cache.tree.nodes.values())
    replay([req(1, a)], cache)  # the second hit
    assert all(n.on_host for n in cache.tree.nodes.values())


def _first_backup_after_admits(hit_count: str) -> tuple[int, list[int]]:
    from sim.driver import simulate

    sc = dict(load_scenario(ROOT / "scenarios/multiturn_tiers.yaml", [
        "workload.num_clients=1", "workload.num_rounds=2", "workload.output_length=256",
        "cache.hicache_write_policy=write_through_selective",
        f"cache.hit_count={hit_count}"]).expand())["L1+L2"]
    kinds = [d[1] for d in simulate(sc, progress=False).decisions]
    backups = [i for i, k in enumerate(kinds) if k == "backup"]
    assert backups, kinds
    return min(backups), [i for i, k in enumerate(kinds) if k == "admit"]


def test_hit_count_once_per_request_backs_up_a_turn_when_the_next_walks_it() -> None:
    """SGLang 0.5.23 counts each node once per request (``inserted_len``): the insert of a
    request's output walks its own prompt again without a second hit, so under
    write_through_selective nothing is backed up before the second turn walks the first.
    SGLang's HiRadixCache (``every_insert``, the default) counts that walk: the prompt is
    backed up when its own request finishes."""
    first, admits = _first_backup_after_admits("once_per_request")
    assert len(admits) == 2 and first > admits[1]
    first, admits = _first_backup_after_admits("every_insert")
    assert first < admits[1]


def test_a_bad_hit_count_rule_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="hit_count"):
        CacheConfig.from_mapping({"hit_count": "twice"})


def test_write_back_with_l3_puts_bytes_into_l3_in_a_simulated_run(tmp_path: Path) -> None:
    """quick.yaml's L1+L2+L3 under write_back: it wrote 0 bytes to L3 before."""
    out = tmp_path / "o"
    assert main(["run", str(ROOT / "scenarios/quick.yaml"), "--variant", "L1+L2+L3",
                 "--set", "cache.hicache_write_policy=write_back", "--out", str(out),
                 "--no-progress"]) == 0
    summary = json.loads((out / "L1+L2+L3" / "summary.json").read_text())
    assert summary["l3_write_bytes"] > 1e9 and summary["l3_read_bytes"] > 1e9
    assert summary["l3_hit_rate"] > 0.2


def test_replay_goes_in_arrival_order_not_file_order(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The issue's reproduction: the same prompt twice, listed last-arrival first."""
    rows = [{"arrival": 1.0, "tokens": list(range(12)), "output_len": 1},
            {"arrival": 0.0, "tokens": list(range(12)), "output_len": 1},
            {"arrival": 0.5, "tokens": list(range(100, 112)), "output_len": 1}]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "o"
    assert main(["replay", "--trace", str(trace), "--format", "tokens", "--page-size",
                 str(PAGE), "--capacity-tokens", "1000", "--json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["hit_rate"] == 12 / 36
    lines = (out / "requests.csv").read_text().splitlines()[1:]
    assert [float(line.split(",")[1]) for line in lines] == [0.0, 0.5, 1.0]
    assert [int(line.split(",")[4]) for line in lines] == [0, 0, 12]  # the later one hits


def test_decisions_are_frozen_records_with_flat_rows() -> None:
    cache = tiered("write_through", device_pages=2)
    replay([req(0, list(range(2 * PAGE))), req(1, list(range(50, 50 + 2 * PAGE)))], cache)
    admits = [d for d in cache.kv.decisions if isinstance(d, Admit)]
    assert [d.row() for d in admits] == [("admit", 0, 0, 0, 0), ("admit", 1, 0, 0, 0)]
    evicts = [d for d in cache.kv.decisions if isinstance(d, Evict)]
    assert evicts and all(d.row()[0] == "evict" and d.how in ("demote", "delete")
                          for d in evicts)


def test_make_room_under_write_back_backs_up_what_it_needs_and_waits_for_it() -> None:
    """As SGLang 0.5.23 (a write_back victim is copied, then demoted, before the next is
    picked): with copies that take time (the scheduler's sink), make_room starts backups
    for the pages it lacks only, starts no more while they are in flight, and demotes
    exactly those once they land. (Before: every evictable leaf was backed up at once.)"""
    cfg = CacheConfig(page_size=PAGE, device_tokens=10 * PAGE, enable_hierarchical_cache=True,
                      hicache_write_policy="write_back")
    plans = PlanBuilder()
    kv = KVCacheManager(cfg, RuntimeInfo("t", 0, PAGE, {Kind.FULL: 10}, {Kind.FULL: 20}), plans)
    device = PageAllocator(10, tier=Tier.DEVICE, runtime_id="t")
    host = PageAllocator(20, tier=Tier.HOST, runtime_id="t")
    for i in range(5):  # five unlocked 2-page leaves fill L1
        kv.tree.insert(page_keys([100 * i + t for t in range(2 * PAGE)], PAGE),
                       {Kind.FULL: device.alloc(2)})
    assert kv.budget.free(Tier.DEVICE) == 0
    assert not kv.make_room(Tier.DEVICE, 3)  # copies under way: not free yet
    assert not kv.make_room(Tier.DEVICE, 3)  # asked again before they land
    plan = plans.build()
    assert [b.src.num_pages for b in plan.backups] == [2, 2]
    assert sum(isinstance(d, Backup) for d in kv.decisions) == 2
    for b in plan.backups:
        kv.backup_placed(b.job_id, host.alloc(b.src.num_pages))
        kv.on_transfer(TransferCompletion(b.job_id, TransferKind.BACKUP, 0.0,
                                          b.src.num_pages))
    assert kv.make_room(Tier.DEVICE, 3) and kv.budget.free(Tier.DEVICE) == 4
    assert sum(isinstance(d, Backup) for d in kv.decisions) == 2
    assert [d.row()[3] for d in kv.decisions if isinstance(d, Evict)] == ["demote"] * 2


def test_tree_options_are_a_scenario_key_the_cache_manager_passes_to_its_tree() -> None:
    sc = load_scenario("hybrid_swa_mamba",
                       ["cache.tree_options.free_swa_tombstone_leaves=true"])
    assert sc.cache.tree_options.free_swa_tombstone_leaves is True
    cache = tiered("write_through")
    assert cache.tree.residency.options.free_swa_tombstone_leaves is False  # SGLang's
    cfg = dataclasses.replace(cache.cfg, tree_options=TreeOptions(free_swa_tombstone_leaves=True))
    assert ReplayCache(cfg).tree.residency.options.free_swa_tombstone_leaves is True


def test_decision_rows_are_their_kind_and_fields_in_order():
    """Decision.row (a flat tuple, no deep copy) equals dataclasses.astuple for every kind:
    each field is a scalar."""
    from dataclasses import astuple, fields

    from hicache.kvcache import decisions as d
    kinds = [c for c in vars(d).values()
             if isinstance(c, type) and issubclass(c, d.Decision) and c is not d.Decision]
    assert len(kinds) >= 8
    for cls in kinds:
        values = [7 if f.type in ("int", int) else "x" if f.type in ("str", str) else "demote"
                  for f in fields(cls)]
        dec = cls(*values)
        assert dec.row() == (cls.kind, *astuple(dec)) == (cls.kind, *values)
