"""A decode fold that ran to its limit goes on past the finish (sim.fold DecodeFolder._chain):
twin runs with chaining on and off (``fold.CHAIN``), and unfolded, are the same to the last
bit, on scenarios where chains happen, end in their first step, and fall back."""

from __future__ import annotations

import pytest

from sim import fold
from sim.driver import SimResult
from tests.sim.test_fold import _assert_same, _fluid_finishes, _run, _variants

_TRACE = ["workload.max_requests=400"]


def _chains(res: SimResult) -> int:
    return sum(rep.folder.chained for rep in res.replicas)


def _released_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """(rid, slot, pages held) of every request row as its release closes it: a page
    placed for a step the request does not run (or missing) shows here, though no
    result reads page ids."""
    from sim.memory import Memory

    seen: list[tuple[int, int, int]] = []
    release = Memory._release

    def spying(self, rel, freed):  # noqa: ANN001, ANN202
        row = self.rows[rel.request.slot_id]
        seen.append((row.rid, rel.request.slot_id, row.size))
        return release(self, rel, freed)

    monkeypatch.setattr(Memory, "_release", spying)
    return seen


def _spy_paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the paths a chain takes: segments that went on, fallbacks after the
    finishing step (its batch executed then), and chained segments stopped in their step
    0 (C', its frees applied in the chain, started unfolded without them)."""
    seen = {"chained": 0, "fallback": 0, "stopped in step 0": 0}
    segment: dict[int, object] = {}  # folder -> its chained segment's plan (step 0's)
    chain, materialize = fold.DecodeFolder._chain, fold.DecodeFolder._materialize

    def chaining(self, *args):  # noqa: ANN001, ANN002, ANN202
        went = yield from chain(self, *args)
        seen["chained" if isinstance(went, tuple) else "fallback"] += 1
        if isinstance(went, tuple):
            segment[id(self)] = went[0]
        return went

    def materializing(self, plan, steps, j, t):  # noqa: ANN001, ANN202
        if j == 0 and plan is segment.get(id(self)) and self._freed is not None:
            seen["stopped in step 0"] += 1
        return materialize(self, plan, steps, j, t)

    monkeypatch.setattr(fold.DecodeFolder, "_chain", chaining)
    monkeypatch.setattr(fold.DecodeFolder, "_materialize", materializing)
    return seen


def test_chained_folds_equal_unchained_and_unfolded_runs_on_the_trace(monkeypatch) -> None:
    """Trace L1+L2+L3 (four replicas, copy kernels, L3 jobs in flight): folds go on past
    finishes; records, decisions, timelines, batch shapes, bytes and what the write-back
    policy saw equal the unchained and the unfolded runs, and so do the floats of every
    non-compute fluid job at its finish (L3 transfers charged at the chained segments'
    changes, those still expected at the finish kept: FluidServer.expect_more)."""
    sc = dict(_variants("mooncake_trace.yaml", _TRACE))["L1+L2+L3"]
    seen = _spy_paths(monkeypatch)
    finishes = _fluid_finishes(monkeypatch)
    released = _released_rows(monkeypatch)
    chained = _run(sc, "L1+L2+L3", True)
    chained_rows = released[:]
    released.clear()
    assert _chains(chained) >= 50 and seen["chained"] == _chains(chained)
    assert seen["fallback"] > 0, "no chain fell back: the step-j+1 execute path is untested"
    chained_floats = [finishes.pop(k) for k in list(finishes)]
    monkeypatch.setattr(fold, "CHAIN", False)
    unchained = _run(sc, "L1+L2+L3", True)
    assert _chains(unchained) == 0
    unchained_floats = [finishes.pop(k) for k in list(finishes)]
    released.clear()
    plain = _run(sc, "L1+L2+L3", False)
    plain_floats = [finishes[k] for k in finishes]
    assert chained_rows == released and chained_rows
    assert chained_floats == unchained_floats == plain_floats
    assert any(others for server in chained_floats for *_, others in server)
    _assert_same(chained, unchained)
    _assert_same(chained, plain)
    assert chained.events < unchained.events  # what chaining is for


@pytest.mark.parametrize("variant", ["L1", "L1+L2", "L1+L2+L3"])
def test_chained_folds_equal_unfolded_runs_on_a_closed_loop(variant: str, monkeypatch) -> None:
    """Multiturn: a finish issues the client's next round (the horizon moves at the
    request-ended handling the chain does), most often a step the chain falls back at;
    the runs equal the unchained and unfolded ones."""
    sc = dict(_variants("multiturn_tiers.yaml", ["workload.num_clients=24",
                                                 "workload.num_rounds=12"]))[variant]
    chained = _run(sc, variant, True)
    assert _chains(chained) >= 5
    monkeypatch.setattr(fold, "CHAIN", False)
    unchained = _run(sc, variant, True)
    _assert_same(chained, unchained)
    _assert_same(chained, _run(sc, variant, False))


def test_chained_segments_stopped_in_their_first_step_equal_unfolded_runs(monkeypatch) -> None:
    """Every chained segment is cut short as soon as the driver's cpu yield for C' ends
    (as an arrival routed then would cut it): step 0 (batch j + 1) resumes as a real op
    and C' starts unfolded without the frees and releases its chain applied already.
    Any cut must leave the unfolded run's state: the run equals the unfolded one."""
    sc = dict(_variants("mooncake_trace.yaml", _TRACE))["L1+L2+L3"]
    seen = _spy_paths(monkeypatch)
    wait = fold.DecodeFolder._wait
    cut: list[int] = []

    def waiting(self, plan, steps, timer, inbox, wake):  # noqa: ANN001, ANN202
        if plan.batch_id in cut:  # a chained segment's: C' is batch step 0 + 1
            return 0, self.env.now, True
        return (yield from wait(self, plan, steps, timer, inbox, wake))

    chain = fold.DecodeFolder._chain

    def chaining(self, *args):  # noqa: ANN001, ANN002, ANN202
        went = yield from chain(self, *args)
        if isinstance(went, tuple):
            cut.append(went[0].batch_id)
        return went

    monkeypatch.setattr(fold.DecodeFolder, "_wait", waiting)
    monkeypatch.setattr(fold.DecodeFolder, "_chain", chaining)
    folded = _run(sc, "L1+L2+L3", True)
    assert seen["stopped in step 0"] >= 20, "C' without its frees is untested"
    _assert_same(folded, _run(sc, "L1+L2+L3", False))
