"""SimRuntime's components on their own (sim.runtime_config, sim.memory, sim.transfers,
sim.accounting) and how the runtime composes them: what each promises (module docs),
and that the names the ops, chains and folds read (``sim.runtime.VIEWS``) are the very
parts of the components, before and after a restart."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
import simpy
from simtoys import make_runtime, toy_model, toy_profile

from hicache.runtime.handles import Kind, StaleHandleError, Tier, page_run
from hicache.runtime.interface import (
    BackupIntent,
    BatchPlan,
    CapacityError,
    Phase,
    Release,
    RequestSlice,
)
from sim.accounting import Accounting
from sim.batch import BatchState
from sim.l3 import L3Store
from sim.memory import Memory
from sim.runtime import MEMORY_VIEWS, VIEWS, SimRuntime
from sim.runtime_config import RuntimeConfig

PAGE = 16
_FULL = Kind.FULL


def _config(**kw: object) -> RuntimeConfig:
    args: dict = {"runtime_id": "r0", "page_size": PAGE, "device_pages": {_FULL: 64},
                  "host_pages": {_FULL: 32}, "layerwise": True, "trace_layers": False,
                  "fold_layers": True, "mem_layout": "layer_first", "backup_throttle": None}
    args.update(kw)
    profile = args.pop("profile", toy_profile())
    return RuntimeConfig.build(profile, toy_model(), **args)


def _views_hold(rt: SimRuntime) -> None:
    for name, (component, attr) in VIEWS.items():
        assert getattr(rt, name) is getattr(getattr(rt, component), attr), name
    for name in MEMORY_VIEWS:  # the current memory's
        assert getattr(rt, name) is getattr(rt.memory, name), name


@pytest.mark.parametrize("with_l3", [False, True])
def test_views_are_the_components_parts_across_restarts(with_l3: bool) -> None:
    env = simpy.Environment()
    l3 = L3Store.mooncake(env, toy_profile().mooncake) if with_l3 else None
    rt = make_runtime(env, toy_profile(), toy_model(), l3=l3)
    assert (rt.l3_client is not None) == with_l3
    parts = (rt.config, rt.transfers, rt.accounting)
    _views_hold(rt)
    h = rt.prepare_batch(BatchPlan(1, slices=(RequestSlice(1, Phase.PREFILL, 0, 40),)))
    rt.execute_batch(h)
    env.run()
    old = rt.memory
    assert old.generation == rt.generation == 1 and rt.open_requests() == 1
    rt.restart()
    _views_hold(rt)
    # config, transfers and accounting live as long as the runtime; memory is per
    # generation: a new one, empty, of the new generation
    assert (rt.config, rt.transfers, rt.accounting) == parts
    assert all(a is b for a, b in zip((rt.config, rt.transfers, rt.accounting), parts,
                                      strict=True))
    assert rt.memory is not old and rt.memory.generation == rt.generation == 2
    assert rt.open_requests() == 0 and rt.full.free_count == rt.config.device_sizes[_FULL]
    assert 1 in rt.batch_shapes  # counts describe the whole run: a restart keeps them
    with pytest.raises(StaleHandleError):
        rt.prepare_batch(BatchPlan(2, slices=(
            RequestSlice(1, Phase.DECODE, 40, 1, request=h.slices[0].request),)))


def test_config_is_frozen_and_its_tables_agree() -> None:
    cfg = _config(mem_layout="page_first_direct")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.page_size = 8  # type: ignore[misc]
    assert cfg.mem_layout == "page_first" and cfg.order == "lowest"
    assert cfg.num_layers == toy_model().num_layers == len(cfg.layer_bytes[_FULL])
    for pool, per_layer in cfg.layer_bytes.items():
        assert cfg.bytes_per_page[pool] == sum(per_layer) > 0
        assert cfg.layers_touched[pool] == sum(1 for b in per_layer if b)
    lifo = _config(profile=replace(toy_profile(), ablate=frozenset({"page_order"})))
    assert lifo.order == "lifo" and not Memory(lifo, 1).lowest
    with pytest.raises(ValueError, match="page_size"):
        _config(page_size=0)


def _place(mem: Memory, plan: BatchPlan) -> tuple:
    checked = mem.apply_frees(plan, l3=False)
    st = BatchState(plan, None, mem.generation)  # type: ignore[arg-type]
    loads: list = []
    return mem.place(plan, checked, st, loads), st, loads


def test_memory_places_lowest_ids_first_and_frees_what_a_release_returns() -> None:
    mem = Memory(_config(), 3)
    (a,), st, loads = _place(mem, BatchPlan(1, slices=(RequestSlice(7, Phase.PREFILL, 0, 40),)))
    assert a.request.generation == 3 and a.request.runtime_id == "r0"
    assert a.kv.page_runs == (page_run(0, 3),) and loads == []
    assert st.prefills == [(40, 0)] and mem.full.free_count == 61
    (b,), _, _ = _place(mem, BatchPlan(2, slices=(RequestSlice(8, Phase.PREFILL, 0, 17),)))
    assert b.kv.page_runs == (page_run(3, 2),)
    # a decode that reaches its row's last page takes the lowest free id
    (a2,), st, _ = _place(mem, BatchPlan(3, slices=(
        RequestSlice(7, Phase.DECODE, 48, 1, request=a.request),)))
    assert a2.kv.page_runs == (page_run(0, 3), page_run(5, 1)) and st.decodes == [48]
    _place(mem, BatchPlan(4, releases=(Release(a.request),)))
    assert set(mem.rows) == {b.request.slot_id} and mem.full.free_count == 62
    (c,), _, _ = _place(mem, BatchPlan(5, slices=(RequestSlice(9, Phase.PREFILL, 0, 64),)))
    assert c.kv.page_runs == (page_run(0, 3), page_run(5, 1))  # the freed ids, lowest first


def test_memory_changes_nothing_when_a_plan_fails() -> None:
    mem = Memory(_config(), 1)
    (a,), _, _ = _place(mem, BatchPlan(1, slices=(RequestSlice(7, Phase.PREFILL, 0, 40),)))
    before = (mem.full.free_count, dict(mem.rows), mem.rows[a.request.slot_id].size)
    too_big = BatchPlan(2, slices=(RequestSlice(8, Phase.PREFILL, 0, 65 * PAGE),),
                        releases=(Release(a.request),))
    with pytest.raises(CapacityError):
        mem.apply_frees(too_big, l3=False)
    assert (mem.full.free_count, dict(mem.rows), mem.rows[a.request.slot_id].size) == before


def test_memory_backups_hold_their_l2_pages_until_ready() -> None:
    env = simpy.Environment()
    mem = Memory(_config(), 1)
    (a,), _, _ = _place(mem, BatchPlan(1, slices=(RequestSlice(7, Phase.PREFILL, 0, 40),)))
    done = env.event()
    pending = mem.backup(BackupIntent(a.kv, job_id=1), done)
    assert pending.dst.tier is Tier.HOST and pending.dst.page_runs == (page_run(0, 3),)
    assert pending.src_runs == [(0, 3)] and pending.dst_runs == [(0, 3)]
    assert mem.host[_FULL].free_count == 29
    assert mem.pending_events(pending.dst) == [done]
    mem.host_ready(pending.dst, done)
    assert mem.pending_events(pending.dst) == []


def test_accounting_records_shapes_and_keeps_its_counters() -> None:
    acc = Accounting()
    counters = (acc.batch_shapes, acc.bytes_accounted, acc.l3_bytes, acc.fold_counts)
    st = BatchState(BatchPlan(4), None, 1)  # type: ignore[arg-type]
    st.prefills, st.decodes = [(30, 10), (5, 0)], [100, 101]
    acc.record_shape(st, 4096)
    assert acc.batch_shapes[4] == {"requests": 4, "tokens": 37, "context_tokens": 211,
                                   "load_bytes": 4096}
    st = BatchState(BatchPlan(5), None, 1)  # type: ignore[arg-type]
    st.decodes = [7, 8, 9]
    acc.record_shape(st, 0)
    assert acc.batch_shapes[5] == {"requests": 3, "tokens": 3, "context_tokens": 24,
                                   "load_bytes": 0}
    assert (acc.batch_shapes, acc.bytes_accounted, acc.l3_bytes, acc.fold_counts) == counters
