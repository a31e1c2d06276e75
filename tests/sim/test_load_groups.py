"""``Transfers.load_groups`` (``SimRuntime.transfers``) shares one tuple of layer-wise
groups among batches whose loads have the same pages and copy calls per pool: over any
sequence of batches, each gets the groups computed afresh for its own loads (same bytes
and calls per layer) and what a chain's steps read of them (``group_steps``), and the
shared groups cannot be changed."""

from __future__ import annotations

import dataclasses

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as hs

from hicache.runtime.handles import Kind
from hicache.runtime.page_ids import runs_of
from sim.batch import group_steps
from tests.sim.simtoys import make_runtime, toy_model, toy_profile

# a load: its source pages in L2 and the device pages it lands in (few ids: the same
# page count comes back with other runs, so other copy calls)
pages = hs.lists(hs.integers(0, 12), min_size=1, max_size=6, unique=True)
load = hs.tuples(pages, hs.permutations(list(range(6))))
batch = hs.lists(load, min_size=1, max_size=3)


def _loads(spec: list[tuple[list[int], list[int]]]) -> list:
    out = []
    for src, order in spec:
        dst = [40 + order[i % 6] + 6 * (i // 6) for i in range(len(src))]
        out.append((Kind.FULL, len(src), runs_of(src), runs_of(dst)))
    return out


@settings(max_examples=60, deadline=None)
@given(batches=hs.lists(batch, min_size=1, max_size=12))
def test_shared_load_groups_are_those_of_each_batch(batches):
    env = simpy.Environment()
    rt = make_runtime(env, toy_profile(), toy_model())
    fresh = make_runtime(env, toy_profile(), toy_model())
    for spec in batches * 2:  # each batch again, once its groups are shared
        loads = _loads(spec)
        fresh.transfers._groups.clear()  # noqa: SLF001
        groups, steps = rt.transfers.load_groups(loads)
        assert (groups, steps) == fresh.transfers.load_groups(loads)
        assert steps == group_steps(groups)  # the steps are those of the groups shared


def test_shared_load_groups_are_frozen():
    env = simpy.Environment()
    rt = make_runtime(env, toy_profile(), toy_model())
    loads = _loads([([1, 2, 5], [0, 1, 2, 3, 4, 5])])
    groups, steps = rt.transfers.load_groups(loads)
    again = rt.transfers.load_groups(loads)
    assert again[0] is groups and again[1] is steps  # shared, computed once
    with pytest.raises(dataclasses.FrozenInstanceError):
        groups[0].nbytes = 0  # type: ignore[misc]
