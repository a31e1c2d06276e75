"""Chain and tail folding (sim.chain_fold, sim.tail_fold): a run with layer-wise load
chains and compute tails folded is the run without, bit for bit (every result field and
the sorted timeline rows), on the shipped scenarios with layer-wise loads and on seeded
variations with L3 (two replicas sharing a store, PCIe / host-memory / NIC / store fault
windows, chunked backups); the folds both happen and get interrupted there (so
materialising is exercised too), and every job's floats at each outside entry are the
unfolded run's."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim.chain_fold as chain_fold
from hicache.scenario import load_scenario
from sim.driver import SimResult, simulate

ROOT = Path(__file__).resolve().parents[2]

# shipped scenarios whose loads run layer by layer (as shipped, or with run.layerwise)
LAYERWISE = {
    "faults.yaml": ["run.layerwise=true"],
    "long_context.yaml": ["workload.count=12"],
    "cross_batch_overlap.yaml": ["run.layerwise=true"],
    "validation/gpu_layerwise.yaml": [],
    "validation/gpu_transfer_bound.yaml": [],
    "validation/gpu_compute_bound.yaml": [],
}


def _run(sc: object, name: str, fold: bool) -> tuple[SimResult, Counter[str]]:
    """Both folds on (or off: ``run.fold_layers``); what they did, over the replicas
    (``SimRuntime.fold_counts``: ``chain_*`` and ``tail_*``)."""
    sc = sc.with_overrides([f"run.fold_layers={str(fold).lower()}"])  # type: ignore[attr-defined]
    res = simulate(sc, name=name, progress=False)
    counts: Counter[str] = Counter()
    for rep in res.replicas:
        counts.update(rep.runtime.fold_counts)
    if not fold:
        assert not counts  # off means off
    return res, counts


def _assert_same(folded: SimResult, plain: SimResult) -> None:
    assert folded.decisions == plain.decisions
    assert folded.records == plain.records  # equal floats, not close
    assert folded.sim_time == plain.sim_time
    assert sorted(folded.unfinished.items()) == sorted(plain.unfinished.items())
    fc, pc = folded.faults, plain.faults
    assert (fc is None) == (pc is None)
    if fc is not None and pc is not None:
        assert [c.counts for c in fc.costs] == [c.counts for c in pc.costs]
    for f, p in zip(folded.replicas, plain.replicas, strict=True):
        assert sorted(f.timeline.as_tuples()) == sorted(p.timeline.as_tuples())
        assert f.runtime.batch_shapes == p.runtime.batch_shapes
        assert f.runtime.bytes_moved == p.runtime.bytes_moved
        assert f.runtime.writeback.steps == p.runtime.writeback.steps


def _compare(sc: object, name: str) -> Counter[str]:
    folded, stats = _run(sc, name, True)
    plain, _ = _run(sc, name, False)
    _assert_same(folded, plain)
    if stats["chain_folded"]:
        assert folded.events < plain.events
    return stats


@pytest.mark.parametrize("name", sorted(LAYERWISE))
def test_folded_chains_equal_unfolded_on_shipped_scenarios(name: str) -> None:
    total: Counter[str] = Counter()
    for variant, sc in load_scenario(ROOT / "scenarios" / name, LAYERWISE[name]).expand():
        total.update(_compare(sc, variant))
    if name == "faults.yaml":
        assert total["chain_folded"] > 100  # L3 loads, layer by layer: chains fold


FAULTS = [
    "{kind: link_slow, link: pcie, factor: %(f).3f, start: %(s).3f, end: %(e).3f}",
    "{kind: link_slow, link: nic, factor: %(f).3f, start: %(s).3f, end: %(e).3f}",
    "{kind: host_pressure, bandwidth_factor: %(f).3f, start: %(s).3f, end: %(e).3f}",
    "{kind: l3_timeout, start: %(s).3f, end: %(e).3f}",
    "{kind: l3_node_down, node: 0, start: %(s).3f, end: %(e).3f}",
    "{kind: l3_store_down, start: %(s).3f, end: %(e).3f}",
]


def _variation(seed: int) -> tuple[list[str], str]:
    """faults.yaml's L1+L2+L3 setup, layer-wise, with a seeded mix of replicas sharing
    the store, a chunked write-back policy and load; and fault windows (set after the
    variant's, which clears them)."""
    rng = random.Random(seed)
    sets = ["run.layerwise=true", f"seed={seed}",
            f"workload.request_rate={rng.choice([8, 16, 32])}",
            f"workload.num_clients={rng.choice([24, 32])}"]
    if rng.random() < 0.5:
        sets += ["replicas=2", "router=cache_aware"]
    policy = rng.choice(["none", "static", "adaptive"])
    sets.append(f"run.writeback.policy={policy}")
    if policy == "static":
        sets.append(f"run.writeback.rate_bytes_per_s={rng.uniform(1e9, 8e9):.3e}")
    faults = []
    for _ in range(rng.randint(0, 3)):
        s = rng.uniform(0.2, 6.0)
        faults.append(rng.choice(FAULTS) % {"f": rng.uniform(0.05, 0.9), "s": s,
                                             "e": s + rng.uniform(0.05, 2.0)})
    return sets, f"faults=[{', '.join(faults)}]"


def _case(seed: int | None) -> tuple[str, object]:
    """faults.yaml's first variant, layer-wise: as shipped (None) or the seeded variation."""
    if seed is None:
        sc = load_scenario(ROOT / "scenarios/faults.yaml", ["run.layerwise=true"])
        (variant, vsc), *_ = sc.expand()
        return variant, vsc
    sets, faults = _variation(seed)
    (variant, vsc), *_ = load_scenario(ROOT / "scenarios/faults.yaml", sets).expand()
    return f"{variant} seed {seed}", vsc.with_overrides([faults])


def test_folded_chains_equal_unfolded_on_seeded_variations_with_l3() -> None:
    total: Counter[str] = Counter()
    for seed in range(16):
        variant, vsc = _case(seed)  # "healthy" with the seeded faults set after
        total.update(_compare(vsc, variant))
    assert total["chain_folded"] > 500 and total["chain_interrupted"] > 50
    assert total["tail_folded"] > 50 and total["tail_interrupted"] > 5
    assert total["chain_absorbed"] > 50 and total["tail_absorbed"] > 5  # L3 changes


def test_the_fold_is_exercised_and_saves_events() -> None:
    sc = load_scenario(ROOT / "scenarios/faults.yaml", ["run.layerwise=true"])
    (variant, vsc), *_ = sc.expand()
    folded, stats = _run(vsc, variant, True)
    plain, _ = _run(vsc, variant, False)
    assert stats["chain_folded"] > 100 and stats["chain_absorbed"] > 10  # L3 changes
    assert stats["chain_groups"] > stats["chain_folded"]  # kernels launched within folds
    assert stats["tail_folded"] > 10
    assert folded.events < plain.events * 0.8


def _entries(sc: object, name: str, fold: bool, monkeypatch: pytest.MonkeyPatch
             ) -> list[tuple]:
    """Every job's (kind, remaining, rate, due) on the server, in the server's order, and
    the server's promised join, each time an L3 or d2h job joins or leaves it (an outside
    entry for a fold): the floats and the order must be the unfolded run's, not only the
    results they lead to."""
    from sim.fluid import FluidServer
    seen: list[tuple] = []
    start, finish = FluidServer._start, FluidServer._finish

    def snap(server: FluidServer, job: object, what: str) -> None:
        if getattr(job, "kind", "") not in ("l3", "d2h"):
            return
        if server.folded is not None:
            server.folded.materialise()
        server._advance()  # a second one at the same time charges nothing
        seen.append((server.env.now, what, tuple(  # in the server's order
            (j.kind, j.remaining, j.rate, j.due) for j in server.jobs),
            server._promised, server._promised_rate))  # the next launch's (FluidServer.promise)

    def patched_start(self: FluidServer, job: object) -> None:
        snap(self, job, "start")
        start(self, job)  # type: ignore[arg-type]

    def patched_finish(self: FluidServer, job: object) -> None:
        snap(self, job, "finish")
        finish(self, job)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(FluidServer, "_start", patched_start)
        m.setattr(FluidServer, "_finish", patched_finish)
        _run(sc, name, fold)
    return sorted(seen)


@pytest.mark.parametrize("seed", [None, 0, 5, 8])
def test_outside_entries_see_the_unfolded_floats(seed: int | None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    variant, vsc = _case(seed)
    folded = _entries(vsc, variant, True, monkeypatch)
    plain = _entries(vsc, variant, False, monkeypatch)
    assert len(folded) > 100
    assert folded == plain


@pytest.mark.parametrize("span", [1, 3])
def test_folds_cut_short_end_through_their_pending_steps(span: int,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A fold that ends before a launch (chain_fold.SPAN; a tie ends one the same way)
    re-arms its pending steps as timers at its end: still the unfolded run."""
    monkeypatch.setattr(chain_fold, "SPAN", span)
    folded = 0
    for seed in (None, 5, 8):
        variant, vsc = _case(seed)
        stats = _compare(vsc, variant)
        assert stats["chain_groups"] <= stats["chain_folded"] * span
        folded += stats["chain_folded"]
    assert folded > 1000


@pytest.mark.parametrize("check", [1, 3])
def test_states_walked_again_from_kept_states(check: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A fold keeps the chain's state every ``CHECK`` transitions; the state after any
    earlier transition (what an outside entry materialises) is walked again from the
    last one kept. It must be the state a walk from the fold's start reaches there (bit
    for bit), with that walk's times and rows the fold's first ones; and folds
    materialised early with states kept that often still give the unfolded run."""
    monkeypatch.setattr(chain_fold, "CHECK", check)
    seen: Counter[str] = Counter()
    plan = chain_fold.ChainFold.plan

    def checked_plan(self: chain_fold.ChainFold, k_rate: float, slow: float,
                     beside: chain_fold.Beside | None = None) -> bool:
        ok = plan(self, k_rate, slow, beside)
        if ok:
            n_all = len(self.times)
            assert len(self.checks) == n_all // check
            for n in range(1, n_all):
                times: list[float] = []
                rows: list[tuple] = []
                state = self._walk(times, rows, n)  # from the fold's start
                assert times == self.times[:n] and rows == self.rows[:state[0][4]]
                assert repr(self._state(n)) == repr(state)
                seen["states"] += 1
        return ok

    monkeypatch.setattr(chain_fold.ChainFold, "plan", checked_plan)
    variant, vsc = _case(5)
    stats = _compare(vsc, variant)
    assert stats["chain_interrupted"] > 5 and seen["states"] > 1000


@pytest.mark.parametrize("seed", [None, 5])
def test_absorbed_changes_splice_the_old_walk(seed: int | None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """After an absorbed L3 change a fold walks again only until a state it keeps equals
    the old walk's (a transition later), and takes the old transitions after it: at
    every materialise, each fold's times, rows, end and the state after each of its
    transitions (bit for bit) are those of a fold that walks to its end each time (no
    state found equal), and so is the run."""
    def run(splice: bool) -> tuple[list[str], Counter[str]]:
        seen: list[str] = []
        materialise = chain_fold.ChainFold.materialise

        def recorded(self: chain_fold.ChainFold, at_end: bool = False) -> None:
            seen.append(repr((self.chain.rt.env.now, self.end, self.final, self.final_c,
                              self.times, self.rows, self.last_check,
                              [self._state(n) for n in range(len(self.times))])))
            materialise(self, at_end)

        with monkeypatch.context() as m:
            m.setattr(chain_fold.ChainFold, "materialise", recorded)
            if not splice:
                m.setattr(chain_fold, "_same", lambda a, b: False)
            variant, vsc = _case(seed)
            res, counts = _run(vsc, variant, True)
        seen.append(repr(res.records) + repr(sorted(res.replicas[0].timeline.as_tuples())))
        return seen, counts

    spliced, counts = run(True)
    walked, plain = run(False)
    assert counts["chain_spliced"] > 10 and not plain["chain_spliced"]
    assert counts["chain_absorbed"] == plain["chain_absorbed"]
    assert spliced == walked


@given(st.lists(st.tuples(st.sampled_from([0, 0, 1, 7, 4096]), st.integers(1, 3)),
                max_size=12))
def test_group_steps_are_the_groups_read_one_by_one(spec: list[tuple[int, int]]) -> None:
    """group_steps per group: the kernel's float work; the landing's row layer, int
    bytes, bytes, layers landed and next group (groups without bytes land with the one
    before); the last group with bytes."""
    from sim.batch import LoadGroup, group_steps
    groups, layer = [], 0
    for nbytes, n in spec:
        groups.append(LoadGroup(range(layer, layer + n), nbytes, 1))
        layer += n
    for seq in (tuple(groups), groups):
        work, lands, last = group_steps(seq)
        assert last == max((g for g, grp in enumerate(groups) if grp.nbytes), default=-1)
        for g, grp in enumerate(groups):
            assert work[g] == float(grp.nbytes) and type(work[g]) is float
            nxt = g + 1
            while nxt < len(groups) and not groups[nxt].nbytes:
                nxt += 1
            layers = grp.layers
            assert lands[g] == (layers.start if len(layers) == 1 else -1, grp.nbytes,
                                grp.nbytes, groups[nxt - 1].layers.stop, nxt)


@given(st.lists(st.one_of(st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 0, 3])),
                max_size=12), st.integers(0, 14))
def test_all_timed_is_the_loop_it_replaces(times: list[float], first: int) -> None:
    """try_fold's check that every layer left takes time, against the plain loop."""
    plain = True
    for i in range(first, len(times)):
        if not times[i] > 0:
            plain = False
            break
    assert chain_fold._all_timed(tuple(times), first) is plain
