"""decode_slice (the scheduler's per-request decode slice, its slots set directly) is the
very value the RequestSlice constructor builds: equal, hashing alike, frozen, pickling
alike, every field read back."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from hicache.runtime.handles import RequestRuntimeHandle
from hicache.runtime.interface import Phase, RequestSlice, decode_slice


@pytest.mark.parametrize("finishes", [False, True])
def test_decode_slice_equals_the_constructor(finishes: bool) -> None:
    h = RequestRuntimeHandle("sim0", 7, 3)
    fast = decode_slice(42, 1000, h, finishes)
    ref = RequestSlice(42, Phase.DECODE, 1000, 1, request=h, finishes=finishes)
    assert type(fast) is RequestSlice
    assert fast == ref and hash(fast) == hash(ref)
    assert dataclasses.astuple(fast) == dataclasses.astuple(ref)
    for f in dataclasses.fields(RequestSlice):  # every slot set, to the constructor's value
        assert getattr(fast, f.name) == getattr(ref, f.name), f.name
    assert pickle.loads(pickle.dumps(fast)) == ref
    assert dataclasses.replace(fast, context_tokens=5) == dataclasses.replace(
        ref, context_tokens=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.context_tokens = 1  # type: ignore[misc]


def test_decode_slice_differs_where_the_values_differ() -> None:
    h = RequestRuntimeHandle("sim0", 7, 3)
    base = decode_slice(1, 10, h, False)
    assert base != decode_slice(2, 10, h, False)
    assert base != decode_slice(1, 11, h, False)
    assert base != decode_slice(1, 10, RequestRuntimeHandle("sim0", 8, 3), False)
    assert base != decode_slice(1, 10, h, True)


def test_the_schedulers_decode_slices_are_the_constructors(monkeypatch) -> None:
    """Scheduler._next_plan builds decode slices in line (decode_slice's stores): each is
    the RequestSlice its request's state after planning says (context = prompt + tokens
    planned - 1, the request's handle, finishes on its last token), every slot set."""
    from pathlib import Path

    from hicache.scenario import load_scenario
    from hicache.scheduler.scheduler import Scheduler
    from sim.driver import simulate

    root = Path(__file__).resolve().parents[2]
    sc = dict(load_scenario(root / "scenarios/multiturn_tiers.yaml",
                            ["workload.num_rounds=3"]).expand())["L1+L2+L3"]
    plan_next, seen = Scheduler._next_plan, [0]

    def checking(self):  # noqa: ANN001, ANN202
        plan = plan_next(self)
        if plan is not None and plan.slices and plan.slices[0].phase is Phase.DECODE:
            for sl in plan.slices:
                st = self.requests[sl.rid]
                ref = RequestSlice(sl.rid, Phase.DECODE, st.prompt_len + st.decode_planned - 1,
                                   1, request=st.handle,
                                   finishes=st.decode_planned >= st.output_len - 1)
                assert type(sl) is RequestSlice
                assert sl == ref and hash(sl) == hash(ref)
                assert dataclasses.astuple(sl) == dataclasses.astuple(ref)
                seen[0] += 1
        return plan

    monkeypatch.setattr(Scheduler, "_next_plan", checking)
    simulate(sc, name="L1+L2+L3", progress=False)
    assert seen[0] > 100, f"few decode slices checked: {seen[0]}"
