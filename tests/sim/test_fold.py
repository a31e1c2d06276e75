"""Decode folding (sim.fold) changes nothing but the cost: every shipped scenario, folded and
unfolded, gives the same decisions, the same per-request times (to the last bit) and, with
``run.timeline_steps``, the same timeline rows."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hicache.scenario import load_scenario
from sim import cost as cost_module
from sim import fold
from sim.cost import SUM_STEPS, VECTOR_STEPS, CostModel
from sim.driver import SimResult, simulate
from sim.hardware.model import load_model
from sim.hardware.profile import load_profile
from sim.simtime import exact_delay
from tests.shared_data import CONVERSATION_TRACE, skip_reason

ROOT = Path(__file__).resolve().parents[2]
TRACE = CONVERSATION_TRACE

# every shipped scenario, shrunk so that both runs of every variant take seconds; each
# keeps what it studies (tiers, policies, model, hardware, replicas and router)
SHRUNK = {
    "quick.yaml": [],
    "multiturn_tiers.yaml": ["workload.num_clients=24", "workload.num_rounds=8"],
    "long_context.yaml": ["workload.count=12"],
    "agent_sessions.yaml": ["workload.num_sessions=12"],
    "hybrid_swa_mamba.yaml": ["workload.num_clients=12", "workload.num_rounds=3"],
    "mooncake_trace.yaml": ["workload.max_requests=150"],
    "writeback_study.yaml": ["workload.num_clients=16", "workload.num_rounds=2",
                             "workload.output_length=128"],
    "cross_batch_overlap.yaml": [],
    "faults.yaml": [],
    "shared_pool.yaml": ["workload.num_clients=12", "workload.num_rounds=3"],
    **{f"validation/{p.name}": [] for p in sorted((ROOT / "scenarios/validation").glob("*.yaml"))},
}


def _variants(name: str, sets: list[str]) -> list[tuple[str, object]]:
    if name.startswith("mooncake"):
        if not TRACE.exists():
            pytest.skip(skip_reason(TRACE))
        sets = [*sets, f"workload.path={TRACE}"]
    return list(load_scenario(ROOT / "scenarios" / name, sets).expand())


def _run(sc: object, name: str, fold: bool, per_step: bool = True) -> SimResult:
    sc = sc.with_overrides([f"run.fold_decode={str(fold).lower()}",  # type: ignore[attr-defined]
                            f"run.timeline_steps={str(per_step).lower()}"])
    return simulate(sc, name=name, progress=False)


def _timelines(res: SimResult) -> list[list[tuple]]:
    return [sorted(rep.timeline.as_tuples()) for rep in res.replicas]


def _assert_same(folded: SimResult, plain: SimResult) -> None:
    assert folded.decisions == plain.decisions
    assert folded.records == plain.records  # ttft, finish, itl: equal floats, not close
    assert folded.sim_time == plain.sim_time
    assert _timelines(folded) == _timelines(plain)
    for f, p in zip(folded.replicas, plain.replicas, strict=True):
        assert f.runtime.batch_shapes == p.runtime.batch_shapes
        assert f.runtime.bytes_moved == p.runtime.bytes_moved
        assert f.runtime.writeback.steps == p.runtime.writeback.steps  # what the policy saw


def test_the_equivalence_test_knows_every_shipped_scenario() -> None:
    shipped = {p.name for p in (ROOT / "scenarios").glob("*.yaml")}
    shipped |= {f"validation/{p.name}" for p in (ROOT / "scenarios/validation").glob("*.yaml")}
    assert shipped == set(SHRUNK), "add the new scenario to SHRUNK"


@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_folded_runs_equal_unfolded_runs_on_every_shipped_scenario(name: str) -> None:
    for variant, sc in _variants(name, SHRUNK[name]):
        _assert_same(_run(sc, variant, True), _run(sc, variant, False))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_folded_runs_equal_unfolded_runs_at_full_size(name: str) -> None:
    for variant, sc in _variants(name, []):
        _assert_same(_run(sc, variant, True), _run(sc, variant, False))


def test_folds_happen_and_leave_one_row_per_segment() -> None:
    """Without timeline_steps a folded segment is one compute row with its step count; the
    rows cover the same batches and the same busy time as the unfolded run's rows."""
    (variant, sc), *_ = _variants("long_context.yaml", SHRUNK["long_context.yaml"])
    folded, plain = _run(sc, variant, True, per_step=False), _run(sc, variant, False)
    assert folded.records == plain.records
    rows = folded.replicas[0].timeline.rows
    segments = [r for r in rows if r.steps > 1]
    assert segments and all(r.lane == "compute" and r.op == "decode" for r in segments)
    assert folded.events < plain.events / 2
    plain_rows = plain.replicas[0].timeline.rows
    decode_batches = {r.batch for r in plain_rows if r.op == "decode"}
    covered = {r.batch + k for r in rows if r.op == "decode" for k in range(r.steps)}
    assert covered == decode_batches
    for seg in segments:  # a segment spans exactly its batches' decode and sample rows
        inside = [r for r in plain_rows if r.lane == "compute"
                  and seg.batch <= r.batch < seg.batch + seg.steps]
        assert min(r.start for r in inside) == seg.start
        assert max(r.end for r in inside) == seg.end


def test_arrivals_issued_by_other_replicas_interrupt_folds_exactly() -> None:
    """A closed loop over two replicas: one replica's finish issues an arrival that the
    other takes in the middle of its fold; the fold stops there, exactly."""
    (variant, sc), *_ = _variants("quick.yaml", ["replicas=2", "router.policy=round_robin",
                                                 "workload.num_rounds=3"])
    folded, plain = _run(sc, variant, True, per_step=False), _run(sc, variant, False)
    assert folded.records == plain.records and folded.decisions == plain.decisions
    assert any(r.steps > 1 for rep in folded.replicas for r in rep.timeline.rows)
    assert sum(rep.folder.interrupted for rep in folded.replicas) > 0


def test_folds_run_past_arrivals_routed_to_other_replicas() -> None:
    """With several replicas a fold does not end at the next arrival: the cache-aware
    router reads a folded replica's load and tree, which no decode step changes, and an
    arrival routed to it interrupts the fold. Folds span arrivals routed elsewhere, and
    the run equals the unfolded one bit for bit."""
    variants = dict(_variants("mooncake_trace.yaml", SHRUNK["mooncake_trace.yaml"]))
    sc = variants["L1"]
    folded = _run(sc, "L1", True, per_step=False)
    plain = _run(sc, "L1", False)
    assert folded.records == plain.records and folded.decisions == plain.decisions
    spanned = sum(1 for i, rep in enumerate(folded.replicas) for row in rep.timeline.rows
                  if row.steps > 1 for r in folded.records
                  if r["replica"] != i and row.start < r["arrival"] < row.end)
    assert spanned > 0
    assert _timelines(_run(sc, "L1", True)) == _timelines(_run(sc, "L1", False))


def test_folds_begin_beside_l3_transfers_on_copy_kernel_runtimes() -> None:
    """SGLang's copy kernel slows compute, so a fold starts with no copy in flight; this
    replica's L3 transfers may be (they change no compute rate): such folds happen on the
    trace's L1+L2+L3 variant, and the run equals the unfolded one bit for bit."""
    variants = dict(_variants("mooncake_trace.yaml", ["workload.max_requests=400"]))
    sc = variants["L1+L2+L3"]
    assert sc.cache.hicache_io_backend == "kernel"  # type: ignore[attr-defined]
    folded = _run(sc, "L1+L2+L3", True)
    assert sum(rep.folder.beside_l3 for rep in folded.replicas) >= 10
    _assert_same(folded, _run(sc, "L1+L2+L3", False))


@pytest.mark.parametrize("now, at", [(0.1, 0.30000000000000004), (12345.678, 12345.679),
                                     (1e-9, 3.3), (7.0, 7.0)])
def test_exact_delay_lands_on_the_time_asked(now: float, at: float) -> None:
    assert now + exact_delay(now, at) == at


@pytest.mark.parametrize("model", ["llama-3-8b", "hybrid-swa-mamba", "llama-3-70b-tp8",
                                   "qwen3-5-397b-a17b-tp8", "inkling-small-tp8",
                                   "deepseek-v4-flash-tp8"])
@pytest.mark.parametrize("hardware", ["h100-sxm", "l40s", "h200-hgx-8gpu"])
def test_decode_works_equal_the_per_step_cost_bit_for_bit(model: str, hardware: str) -> None:
    """The fold's O(1)-per-step decode cost is the unfolded compute op's sum of layer
    times, float for float, across the SWA window (the hybrid model's is 4096), with
    routed experts, tensor-parallel all-reduces (h200-hgx-8gpu) and compressed KV."""
    cost = CostModel(load_profile(hardware), load_model(model))
    # chunks of VECTOR_STEPS or more: layer times and sums with numpy; of SUM_STEPS or
    # more: sums with numpy; shorter: Python's loop and sum
    steps = 2 * VECTOR_STEPS + 5
    for contexts in ([0], [4090, 17, 4094, 63, 64, 100_000], list(range(1, 200, 7))):
        works = cost.decode_works(contexts, steps)
        assert works == [sum(cost.batch_layer_times([], [c + k for c in contexts]))
                         for k in range(steps)]
        assert cost.decode_works(contexts, 5, 7) == works[7:12]  # a later chunk, short
        assert cost.decode_works(contexts, VECTOR_STEPS, 9) == works[9:9 + VECTOR_STEPS]
    assert works[11] > works[0]  # context grows: so does the cost


@pytest.mark.parametrize("sequential", [True, False])
@pytest.mark.parametrize("model, hardware", [("llama-3-8b", "h100-sxm"),
                                             ("llama-3-70b-tp8", "h200-hgx-8gpu")])
def test_decode_works_every_chunk_path_bit_for_bit(model: str, hardware: str, sequential: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of decode_works' paths (Python's sum, layer times in a loop or with numpy,
    layer sums with numpy's reduction; only Python's sum where sum() does not add in
    order) gives the per-step cost's floats, at every chunk length around the
    thresholds; with tensor-parallel all-reduces (tp8) and without (their term is 0.0)."""
    if sequential and not cost_module._SEQUENTIAL_SUM:
        pytest.skip("this Python's sum() compensates: decode_works takes it at every length")
    monkeypatch.setattr(cost_module, "_SEQUENTIAL_SUM", sequential)
    rng = random.Random(51)
    lengths = sorted({1, 2, 3, SUM_STEPS - 1, SUM_STEPS, SUM_STEPS + 1, VECTOR_STEPS - 1,
                      VECTOR_STEPS, VECTOR_STEPS + 1, 2 * VECTOR_STEPS + 3, 97})
    for trial in range(4):
        cost = CostModel(load_profile(hardware), load_model(model))  # no memo shared
        contexts = [rng.randrange(0, 50_000) for _ in range(rng.randrange(1, 20))]
        first = rng.randrange(0, 300) if trial else 0
        for steps in lengths:
            works = cost.decode_works(contexts, steps, first)
            # sequential: the per-step cost as the compute op sums it (sum() adds in order)
            assert works == [sum(cost.batch_layer_times([], [c + k for c in contexts]))
                             for k in range(first, first + steps)], (steps, contexts)


def _bound(cost: CostModel, contexts: list[int], k: int) -> tuple[float, float]:
    """(compute, memory) roofline terms of one full-attention layer at decode step k."""
    flops, nbytes = cost._work("full", (), [c + k for c in contexts])
    return flops / cost.flops_per_s, nbytes / cost.hbm


@pytest.mark.parametrize("sequential", [True, False])
@pytest.mark.parametrize("pair_flops, contexts, first, steps", [
    (None, [40] * 400, 0, 300),  # compute-bound (400 short requests), memory-bound later
    (1e7, [5000, 20, 700] + [0] * 27, 0, 300),  # memory-bound, compute-bound later
    (1e7, [5000, 20, 700] + [0] * 27, 80, 12),  # the same, a short chunk (the loop)
    (None, [9000, 300], 7, 60),  # memory-bound throughout (the shortcut)
])
def test_decode_works_memory_bound_shortcut_only_where_it_holds(
        sequential: bool, pair_flops: float | None, contexts: list[int], first: int,
        steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_work_column skips the compute term when the last step's is at most the
    first step's memory term; where the roofline's max changes side within a chunk, in
    either direction, every step still takes max(compute, memory) as the unfolded
    compute op's layer times do (an attention's flops per pair set high makes compute
    grow faster than memory: costly pairs)."""
    if sequential and not cost_module._SEQUENTIAL_SUM:
        pytest.skip("this Python's sum() compensates")
    monkeypatch.setattr(cost_module, "_SEQUENTIAL_SUM", sequential)
    cost = CostModel(load_profile("h100-sxm"), load_model("llama-3-8b"))
    if pair_flops is not None:
        cost.attn_flops_per_pair = pair_flops  # read by both the fold's and the op's path
    a0, b0 = _bound(cost, contexts, first)
    a1, b1 = _bound(cost, contexts, first + steps - 1)
    if contexts == [9000, 300]:
        assert a1 < b0  # the shortcut's case
    else:  # the case asked for: the max changes side within the chunk
        assert (a0 > b0) != (a1 > b1)
    works = cost.decode_works(contexts, steps, first)
    assert works == [sum(cost.batch_layer_times([], [c + k for c in contexts]))
                     for k in range(first, first + steps)]


@settings(max_examples=60, deadline=None)
@given(n=hs.integers(1, 40), steps=hs.integers(2, 120), lead=hs.floats(0.0, 1.0),
       pair_flops=hs.sampled_from([None, 3e6, 1e7, 1e8]))
def test_decode_works_equal_the_layer_times_whichever_term_bounds(
        n: int, steps: int, lead: float, pair_flops: float | None) -> None:
    """Any batch size and chunk, memory-bound, compute-bound or crossing from one to the
    other within the chunk (with costly pairs the batch's contexts are put where the
    compute term overtakes the memory term, ``lead`` of the chunk in): decode_works gives
    the unfolded compute op's sums of layer times, float for float."""
    cost = CostModel(load_profile("h100-sxm"), load_model("llama-3-8b"))
    pairs_at = 0  # the sum of (c + 1) at the chunk's first step
    if pair_flops is not None:
        cost.attn_flops_per_pair = pair_flops
        flops, nbytes = cost._fixed("full", n, n)
        kv = cost.kv_token["full"]
        # a(P) = (flops + pair_flops P) / F, b(P) = (nbytes + (P + n) kv) / H: equal at
        cross = (((nbytes + n * kv) / cost.hbm - flops / cost.flops_per_s)
                 / (pair_flops / cost.flops_per_s - kv / cost.hbm))
        pairs_at = max(n, int(cross) - int(lead * steps) * n)
    total = pairs_at - n  # contexts summing to it
    contexts = [total // n + (i < total % n) for i in range(n)]
    assert cost.decode_works(contexts, steps) == [
        sum(cost.batch_layer_times([], [c + k for c in contexts])) for k in range(steps)]


@pytest.mark.parametrize("model", ["llama-3-8b", "hybrid-swa-mamba"])
def test_decode_work_column_is_decode_works_floats(model: str) -> None:
    """decode_work_column gives decode_works' floats at every chunk length, as numpy's
    float64 column where numpy adds the layer times (the fold times a long chunk from it
    without a list in between), else as a list."""
    cost = CostModel(load_profile("h100-sxm"), load_model(model))
    contexts = [4090, 17, 4094, 63, 100_000]
    for steps in (1, SUM_STEPS, VECTOR_STEPS - 1, VECTOR_STEPS, 97):
        column = cost.decode_work_column(contexts, steps, 11)
        assert isinstance(column, list | np.ndarray)
        floats = column if isinstance(column, list) else column.tolist()
        assert floats == cost.decode_works(contexts, steps, 11)
        assert all(type(w) is float for w in cost.decode_works(contexts, steps, 11))
    vectorized = isinstance(cost.decode_work_column(contexts, 97), np.ndarray)
    assert vectorized == (model == "llama-3-8b" and cost_module._SEQUENTIAL_SUM)


@pytest.mark.parametrize("cpu", [0.0, 2e-4, 0.05])
@pytest.mark.parametrize("slowdown", [0.0, 0.3])
def test_schedule_times_long_chunks_as_the_loop_also_at_a_slowed_rate(
        cpu: float, slowdown: float) -> None:
    """DecodeFolder._schedule's steps, chunks of VECTOR_CHUNK or more timed from numpy's
    work column (divided by the rate beside a copy kernel that slows compute, as the
    fluid server's ``work / rate``), equal the loop's, float for float and as Python
    floats; with a late driver (cpu 0.05) the loop takes each chunk after its first step."""
    from types import SimpleNamespace as NS

    cost = CostModel(load_profile("h100-sxm"), load_model("llama-3-8b"))
    folder = fold.DecodeFolder.__new__(fold.DecodeFolder)
    folder.env, folder.cpu = NS(now=12.5), cpu
    folder.rt = NS(cost=cost, fluid=NS(kinds={"d2h": 1} if slowdown else {}),
                   link=NS(slowdown=slowdown))
    folder.copies_slow_compute = bool(slowdown)
    folder._copy_kernel = lambda: NS(due=1e9)  # a finite horizon: chunks 16, 16, 32, 64..
    folder.horizon = lambda: 1e9 if slowdown else math.inf
    contexts = [300, 4000, 17, 9000]
    steps = folder._schedule(NS(slices=[NS(context_tokens=c) for c in contexts]), 300)
    rate = 1.0 - slowdown
    works = cost.decode_works(contexts, 300)
    sample = cost.sample_time(len(contexts))
    loop = _one_by_one(12.5, [w / rate for w in works] if slowdown else works,
                       sample / rate if slowdown else sample, cpu, 1e9)
    assert len(steps) == len(loop) == 300
    assert steps.work == works
    columns = (steps.start, steps.compute_end, steps.end, steps.taken)
    assert list(zip(*columns, strict=True)) == loop
    assert all(type(x) is float for col in (steps.work, *columns) for x in col)


@pytest.mark.parametrize("cpu", [0.0, 2e-4, 0.05])
@pytest.mark.parametrize("horizon", [math.inf, 12.5 + 3.0])
def test_schedule_equal_whichever_path_times_each_chunk(
        cpu: float, horizon: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where numpy starts (sim.cost's SUM_STEPS and VECTOR_STEPS, sim.fold's VECTOR_CHUNK:
    a matter of speed in a run) changes no float of a fold's steps: every chunk in
    Python's loop and sum(), or every chunk with numpy, gives the shipped thresholds'."""
    from types import SimpleNamespace as NS

    def steps(threshold: int | None) -> list[list[float]]:
        if threshold is not None:
            monkeypatch.setattr(cost_module, "SUM_STEPS", threshold)
            monkeypatch.setattr(cost_module, "VECTOR_STEPS", threshold)
            monkeypatch.setattr(fold, "VECTOR_CHUNK", threshold)
        cost = CostModel(load_profile("h100-sxm"), load_model("llama-3-8b"))
        folder = fold.DecodeFolder.__new__(fold.DecodeFolder)
        folder.env, folder.cpu = NS(now=12.5), cpu
        folder.rt = NS(cost=cost, fluid=NS(kinds={}), link=NS(slowdown=0.0))
        folder.copies_slow_compute = False
        folder.horizon = lambda: horizon
        contexts = [300, 4000, 17, 9000, 120_000]
        out = folder._schedule(NS(slices=[NS(context_tokens=c) for c in contexts]), 700)
        return [out.work, out.start, out.compute_end, out.end, out.taken]

    shipped = steps(None)
    assert len(shipped[0]) > 50
    assert steps(2) == shipped
    assert steps(10 ** 9) == shipped


FAULTS = ["{kind: l3_store_down, start: %r, end: %r}",
          "{kind: l3_node_down, node: 0, start: %r, end: %r}",
          "{kind: l3_timeout, start: %r, end: %r}",
          "{kind: link_slow, link: nic, factor: 0.1, start: %r, end: %r}",
          "{kind: link_slow, link: pcie, factor: 0.1, start: %r, end: %r}",
          "{kind: host_pressure, bandwidth_factor: 0.1, start: %r, end: %r}"]


def test_fault_windows_that_open_and_close_inside_folds_change_nothing_but_the_cost() -> None:
    """Each fault kind, its window opening inside one long fold and closing inside another
    (direct copies: backups and L3 stores may run while decode folds). No fault changes a
    compute time, so a fold may run through a fault's edge; what the fault slows or fails
    (a store, a backup) completes at its own time and interrupts the fold there."""
    (_, sc), *_ = _variants("faults.yaml", [
        "workload.num_clients=2", "workload.num_rounds=2", "workload.output_length=400",
        "workload.request_length=8192", "workload.request_rate=2",
        "cache.hicache_io_backend=direct"])
    healthy = _run(sc, "healthy", True, per_step=False)
    longest = sorted((r for r in healthy.replicas[0].timeline.rows if r.steps > 1),
                     key=lambda r: r.steps)[-2:]
    start, end = sorted((r.start + r.end) / 2 for r in longest)
    edges_folded_over = changed = 0
    for fault in FAULTS:
        faulty = sc.with_overrides(  # type: ignore[attr-defined]
            [f"faults=[{fault % (start, end)}]"])
        folded, plain = _run(faulty, fault, True, per_step=False), _run(faulty, fault, False)
        assert folded.records == plain.records and folded.decisions == plain.decisions
        assert folded.sim_time == plain.sim_time
        assert [c.counts for c in folded.faults.costs] == [c.counts for c in plain.faults.costs]
        changed += folded.records != healthy.records
        edges_folded_over += sum(1 for r in folded.replicas[0].timeline.rows if r.steps > 1
                                 for t in (start, end) if r.start < t < r.end)
        perstep = _run(faulty, fault, True, per_step=True)
        assert _timelines(perstep) == _timelines(_run(faulty, fault, False, per_step=True))
    assert edges_folded_over > 0 and changed > 0


def test_folds_begin_as_the_cache_only_plans_behind_the_older_batch_complete() -> None:
    """A transfer that completes while two batches are in flight leaves a cache-only plan
    queued behind the older one on the compute stream: it completes in that batch's
    wake-up, where a fold may start (Scheduler.steady_decode counts compute plans only).
    Such folds happen on multiturn_tiers' L1+L2+L3 variant, and the run equals the
    unfolded one in records, decisions, timelines and what the write-back policy saw."""
    variants = dict(_variants("multiturn_tiers.yaml", SHRUNK["multiturn_tiers.yaml"]))
    sc = variants["L1+L2+L3"]
    folded = _run(sc, "L1+L2+L3", True)
    assert sum(rep.folder.beside_cache_only for rep in folded.replicas) >= 10
    _assert_same(folded, _run(sc, "L1+L2+L3", False))


def test_folds_take_transfer_completions_that_change_no_step_and_go_on() -> None:
    """A store's or prefetch's completion during a fold is taken in a scheduler step at
    its time, as unfolded; when that step plans nothing and the pipeline stays steady the
    fold goes on, else the driver goes on with the step's result (a backup's completion
    plans the store). The trace's L1+L2+L3 variant has both, and equals the unfolded run."""
    variants = dict(_variants("mooncake_trace.yaml", ["workload.max_requests=400"]))
    sc = variants["L1+L2+L3"]
    folded = _run(sc, "L1+L2+L3", True)
    assert sum(rep.folder.absorbed for rep in folded.replicas) >= 50
    _assert_same(folded, _run(sc, "L1+L2+L3", False))


def _one_by_one(taken: float, works: list[float], sample: float, cpu: float,
                horizon: float) -> list[tuple[float, float, float, float]]:
    """DecodeFolder._schedule's loop, step by step: (start, compute end, end, taken)."""
    out = []
    for work in works:
        prepared = taken + cpu if cpu > 0 else taken
        start = taken
        compute_end = start + work if work > 0 else start
        end = compute_end + sample if sample > 0 else compute_end
        taken = end if end >= prepared else prepared
        if taken >= horizon:
            break
        out.append((start, compute_end, end, taken))
    return out


@pytest.mark.parametrize("sample", [0.0, 3.1e-4])
@pytest.mark.parametrize("cpu", [0.0, 2e-4, 9e-3])
def test_steps_timed_at_once_equal_the_loop_up_to_the_first_late_driver(
        sample: float, cpu: float) -> None:
    """_steps_at_once times the steps the loop would, float for float, as long as each
    step ends after the driver's next plan is ready; it stops before the first that does
    not (the loop goes on from there) and before the first taken at the horizon."""
    rng = random.Random(7)
    works = [rng.choice([0.0, rng.uniform(1e-3, 1.2e-2)]) for _ in range(300)]
    taken = 1234.5678
    for horizon in (math.inf, taken + 0.4):
        out = fold.FoldedSteps()
        got, stop = fold._steps_at_once(out, taken, works, sample, cpu, horizon)
        loop = _one_by_one(taken, works, sample, cpu, horizon)
        assert list(zip(out.start, out.compute_end, out.end, out.taken,
                        strict=True)) == loop[:got]
        # the first step taken later than it ends: the driver's plan was not ready
        late = next((i for i, step in enumerate(loop) if step[3] != step[2]), None)
        if late is None:
            assert got == len(loop) and stop == (len(loop) < len(works))
        else:
            assert got == late and not stop
        assert (late is None) == (cpu <= sample)  # a zero work ends a sample after it starts
        assert stop or late is not None or horizon == math.inf


@settings(max_examples=300, deadline=None)
@given(works=hs.lists(hs.sampled_from([0.0, 1e-3, 2.5e-3, 7e-3]) | hs.floats(0.0, 2e-2),
                      min_size=1, max_size=80),
       sample=hs.sampled_from([0.0, 3.1e-4, 1e-3]), cpu=hs.sampled_from([0.0, 2e-4, 4e-3]),
       at=hs.integers(-1, 90), nudge=hs.sampled_from([-1e-9, 0.0, 1e-9]))
def test_steps_at_once_stop_where_the_loop_does(works: list[float], sample: float, cpu: float,
                                                at: int, nudge: float) -> None:
    """_steps_at_once stops before the first step whose driver is late or that is taken
    at or after the horizon, also when the horizon is exactly a step's end or several
    steps end at once (zero works, no sample): the horizon is put at a step's end, just
    before or after it (``at`` < 0: none)."""
    taken = 1234.5678
    free = _one_by_one(taken, works, sample, cpu, math.inf)
    late = next((i for i, step in enumerate(free) if step[3] != step[2]), len(free))
    horizon = math.inf if at < 0 or not free else free[min(at, len(free) - 1)][2] + nudge
    reach = next((i for i in range(late) if free[i][3] >= horizon), None)
    out = fold.FoldedSteps()
    got, stop = fold._steps_at_once(out, taken, works, sample, cpu, horizon)
    assert (got, stop) == ((late, False) if reach is None else (reach, True))
    assert type(stop) is bool
    assert list(zip(out.start, out.compute_end, out.end, out.taken, strict=True)) == free[:got]


def test_long_folds_time_their_steps_at_once_and_equal_unfolded_runs(monkeypatch) -> None:
    """Several replicas (no horizon: a fold's limit is known) time a fold's steps in long
    chunks with numpy; the run equals the unfolded one."""
    calls: list[int] = []
    at_once = fold._steps_at_once
    monkeypatch.setattr(fold, "_steps_at_once", lambda *a: _spy(calls, at_once, *a))
    variants = dict(_variants("mooncake_trace.yaml", ["workload.max_requests=400"]))
    sc = variants["L1+L2+L3"]
    folded = _run(sc, "L1+L2+L3", True)
    assert sum(1 for got in calls if got >= fold.VECTOR_CHUNK) >= 20, calls
    _assert_same(folded, _run(sc, "L1+L2+L3", False))


def _spy(calls: list[int], at_once, *args):  # noqa: ANN001, ANN002, ANN202
    got, stop = at_once(*args)
    calls.append(got)
    return got, stop


def test_folds_are_not_tried_beside_a_backup_with_l3_and_copy_kernels(monkeypatch) -> None:
    """With L3 and copy kernels that slow compute, a backup on the d2h stream when a fold
    would start means none can start unless its kernel copies and ends late enough
    (steps_allowed says so at once): without that rule the fold's entry is tried and
    fails, so the same folds happen and the run is the same (and equal to the unfolded
    one)."""
    sc = dict(_variants("multiturn_tiers.yaml", SHRUNK["multiturn_tiers.yaml"]))["L1+L2+L3"]
    allowed = fold.DecodeFolder.steps_allowed
    refused = []

    def spying(self, plans):  # noqa: ANN001, ANN202
        refused.append(self._backup_blocks and not self.rt.streams["d2h"].idle()
                       and not self._copy_fits())
        return allowed(self, plans)

    monkeypatch.setattr(fold.DecodeFolder, "steps_allowed", spying)
    ruled = _run(sc, "L1+L2+L3", True)
    assert sum(refused) >= 20, "the rule never refused: the test shows nothing"

    def without_rule(self, plans):  # noqa: ANN001, ANN202
        self._backup_blocks = False
        return allowed(self, plans)

    monkeypatch.setattr(fold.DecodeFolder, "steps_allowed", without_rule)
    tried = _run(sc, "L1+L2+L3", True)

    def folds(res: SimResult) -> list[tuple[int, int]]:
        return [(r.folder.folds, r.folder.folded_steps) for r in res.replicas]

    assert folds(ruled) == folds(tried) and folds(ruled)[0][0] > 0
    _assert_same(ruled, tried)
    _assert_same(ruled, _run(sc, "L1+L2+L3", False))


def _fluid_finishes(monkeypatch) -> dict[int, list]:  # noqa: ANN001
    """Record, on each fluid server, every finish of a job other than compute (which a
    fold skips): (time, kind, rate, the other such jobs' (kind, remaining, rate)),
    their remaining just split at that finish as the server splits it (a fold's skipped
    changes caught up first)."""
    from sim.fluid import FluidServer

    finishes: dict[int, list] = {}
    remove = FluidServer._remove  # called by _finish (and cancel) after the split

    def spying(self, job):  # noqa: ANN001, ANN202
        if job.kind != "compute":
            others = tuple((j.kind, j.remaining, j.rate) for j in self.jobs
                           if j.kind != "compute" and j is not job)
            finishes.setdefault(id(self), []).append(
                (self.env.now, job.kind, job.rate, others))
        return remove(self, job)

    monkeypatch.setattr(FluidServer, "_remove", spying)
    return finishes


def test_folds_run_beside_a_backups_copy_kernel_at_the_slowed_compute_rate(monkeypatch) -> None:
    """With L3 and SGLang's copy kernel, a fold may start while a backup's kernel copies
    (DecodeFolder.beside_copy): its steps run at 1 - compute_slowdown and it ends before
    the kernel can finish. The trace's L1+L2+L3 variant has such folds (some ended early
    by an arrival or a completion: a step resumed at the slowed rate), and equals the
    unfolded run in records, timelines and every non-compute fluid job's floats at its
    finish (the kernels' and L3 transfers' remaining, rate and due)."""
    variants = dict(_variants("mooncake_trace.yaml", ["workload.max_requests=400"]))
    sc = variants["L1+L2+L3"]
    assert sc.cache.hicache_io_backend == "kernel"  # type: ignore[attr-defined]
    stopped: list[int] = []
    materialize = fold.DecodeFolder._materialize

    def spying(self, plan, steps, j, t):  # noqa: ANN001, ANN202
        if t < steps.taken[-1] and self.rt.fluid.kinds.get("d2h", 0):
            stopped.append(j)
        return materialize(self, plan, steps, j, t)

    monkeypatch.setattr(fold.DecodeFolder, "_materialize", spying)
    finishes = _fluid_finishes(monkeypatch)
    folded = _run(sc, "L1+L2+L3", True)
    assert sum(rep.folder.beside_copy for rep in folded.replicas) >= 10
    assert stopped, "no fold beside a kernel ended early: the resumed step is untested"
    folded_floats = [finishes.pop(k) for k in list(finishes)]
    plain = _run(sc, "L1+L2+L3", False)
    assert [finishes[k] for k in finishes] == folded_floats
    assert any(kind == "d2h" for server in folded_floats for _, kind, *_ in server)
    assert any(others for server in folded_floats for *_, others in server)
    _assert_same(folded, plain)


class _Allocator:
    """Hands out a shuffled free list in order (what several one-page calls would)."""

    def __init__(self, rng: random.Random) -> None:
        self.free = rng.sample(range(1000), 1000)

    def allocate(self, n: int) -> list[int]:
        out, self.free = self.free[:n], self.free[n:]
        return out


class _Row:
    """A row that records its appends (the pages, and when: a global order)."""

    def __init__(self, pages: int, log: list) -> None:
        self.pages, self.log = list(range(-pages, 0)), log

    @property
    def size(self) -> int:
        return len(self.pages)

    def append(self, pages: list[int], own: bool) -> None:
        assert own
        self.log.append((id(self), list(pages)))
        self.pages += pages

    def append_runs(self, runs: list[tuple[int, int]], own: bool) -> None:
        self.append([p for s, n in runs for p in range(s, s + n)], own)


@pytest.mark.parametrize("seed", range(40))
def test_place_pages_allocates_as_one_page_prepares_would(seed: int) -> None:
    """Pages for decode steps 0..n-1 of a plan's rows: each row gets the pages it needs,
    the same page ids in the same order (and the rows in the same order) as the unfolded
    prepares, step by step and slice by slice, one page at a time, would give."""
    from types import SimpleNamespace as NS

    from hicache.runtime.handles import Kind

    rng = random.Random(seed)
    page, n = rng.choice([1, 4, 16]), rng.randint(1, 40)
    shapes = [(rng.randint(0, 3), rng.randint(0, page)) for _ in range(rng.randint(1, 6))]
    outs = []
    for folded in (True, False):
        log: list = []
        rows = {i: _Row(held, log) for i, (held, _) in enumerate(shapes)}
        # a context that fits in the pages held, ``slack`` tokens short of filling them
        slices = [NS(request=NS(slot_id=i), rid=i,
                     context_tokens=max(0, held * page - min(slack, held * page)))
                  for i, (held, slack) in enumerate(shapes)]
        alloc = _Allocator(random.Random(seed))
        rt = NS(page_size=page, rows=rows, device={Kind.FULL: alloc})
        if folded:
            folder = fold.DecodeFolder.__new__(fold.DecodeFolder)
            folder.rt = rt
            folder._place_pages(NS(slices=slices), n)
        else:
            for k in range(n):
                for s in slices:
                    row = rows[s.request.slot_id]
                    if len(row.pages) * page < s.context_tokens + k + 1:
                        row.append(alloc.allocate(1), own=True)
        outs.append(([rows[i].pages for i in rows], alloc.free,
                     [(list(rows).index(next(i for i in rows if id(rows[i]) == r)), p)
                      for r, p in log]))
    folded_out, plain_out = outs
    assert folded_out[:2] == plain_out[:2]
    # rows take their pages in one append each, in the order of their first new page
    firsts = [r for r, _ in plain_out[2]]
    assert [r for r, _ in folded_out[2]] == list(dict.fromkeys(firsts))


@settings(max_examples=200, deadline=None)
@given(rows=hs.lists(hs.tuples(hs.sampled_from([0.0, 1e-3]) | hs.floats(0.0, 2e-2),
                               hs.floats(0.0, 1e3), hs.floats(0.0, 1e-2), hs.floats(0.0, 1e-3)),
                     min_size=1, max_size=40),
       sampled=hs.booleans())
def test_changes_interleave_the_columns_as_the_steps_run(rows: list, sampled: bool) -> None:
    """_changes lists each step's compute job start and end (and its sample's, when
    sampling takes time), step by step; a step of no work submits no compute job."""
    from types import SimpleNamespace as NS

    steps = fold.FoldedSteps()
    for work, start, dc, ds in rows:
        steps.work.append(work)
        steps.start.append(start)
        steps.compute_end.append(start + dc)
        steps.end.append(start + dc + ds)
        steps.taken.append(start + dc + ds)
    folder = fold.DecodeFolder.__new__(fold.DecodeFolder)
    folder.rt = NS(cost=NS(sample_time=lambda n: 3e-4 if sampled else 0.0))
    expect = []
    for w, s, ce, e in zip(steps.work, steps.start, steps.compute_end, steps.end, strict=True):
        if w > 0:
            expect += [s, ce]
        if sampled:
            expect += [ce, e]
    got = folder._changes(NS(slices=[None] * 3), steps)
    assert got == expect and all(a is b for a, b in zip(got, expect, strict=True))


@pytest.mark.parametrize("sample", [3.1e-4, 1e-3])
@pytest.mark.parametrize("over", [0.0, "next", 1e-6, 5e-5, 0.5])
def test_steps_at_once_with_the_driver_cpu_about_the_sample(sample: float, over) -> None:  # noqa: ANN001
    """With ``cpu <= sample`` no step's driver is late; just above it a step of no work
    is late, or not, as the loop's floats say: _steps_at_once stops where the loop does."""
    cpu = math.nextafter(sample, math.inf) if over == "next" else sample * (1 + over)
    rng = random.Random(59)
    for taken in (0.0, 1234.5678, 3.0e5):
        works = [rng.choice([0.0, 0.0, rng.uniform(0.0, 3e-4), 2e-3]) for _ in range(200)]
        loop = _one_by_one(taken, works, sample, cpu, math.inf)
        late = next((i for i, step in enumerate(loop) if step[3] != step[2]), len(loop))
        out = fold.FoldedSteps()
        got, stop = fold._steps_at_once(out, taken, works, sample, cpu, math.inf)
        assert (got, stop) == (late, False)
        assert list(zip(out.start, out.compute_end, out.end, out.taken, strict=True)) == loop[:got]
        assert late < len(loop) or over != 0.5  # a zero work's step is late: tested
