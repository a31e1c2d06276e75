"""Decode folds while the queue head waits for its own L3 prefetch under ``timeout``
(``L3Prefetcher.still`` until its deadline, ``Scheduler.fold_deadline``): the fold's steps
are all taken before any timer the unfolded driver sets for that deadline could fire
(``sim.fold._before``), and its wait for the batch before the fold sets the driver's
own timer. Twin runs: folded and unfolded, and the switch on and off, equal bit for bit.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hicache.kvcache import prefetch
from hicache.scenario import Scenario
from sim.fold import _before
from tests.sim.test_fault_properties import BASE as FAULTS_BASE
from tests.sim.test_fold import _assert_same, _run, _variants


@settings(max_examples=2000, deadline=None)
@given(hs.floats(min_value=1e-6, max_value=1e7), hs.floats(min_value=0.0, max_value=1.0))
def test_every_driver_timer_for_a_deadline_fires_at_or_after_the_bound(
        deadline: float, share: float) -> None:
    """The driver sets ``env.timeout(deadline - now)`` at its time ``now`` before the
    deadline: it lands at ``now + (deadline - now)``, never before ``_before(deadline)``,
    so a fold whose steps are all taken before the bound meets none of them."""
    now = min(deadline * share, math.nextafter(deadline, 0.0))
    bound = _before(deadline)
    assert bound < deadline
    assert now + (deadline - now) >= bound


def test_no_deadline_means_no_bound() -> None:
    assert _before(None) == math.inf


def _trace_l3(requests: int, timeout: float | None = None) -> object:
    """The trace's L1+L2+L3 variant; ``timeout``: every prefetch's (seconds), short enough
    that heads' deadlines pass while folds would run on (else they come seconds later)."""
    sets = [f"workload.max_requests={requests}", "run.layerwise=true"]
    if timeout is not None:
        extra = "cache.hicache_storage_backend_extra_config"
        sets += [f"{extra}.prefetch_timeout_base={timeout}",
                 f"{extra}.prefetch_timeout_per_ki_token=0.0"]
    sc = dict(_variants("mooncake_trace.yaml", sets))["L1+L2+L3"]
    assert sc.cache.hicache_storage_prefetch_policy == "timeout"  # type: ignore[attr-defined]
    return sc


@pytest.mark.parametrize("timeout", [None, 0.1, 0.2])
def test_folds_before_a_waiting_heads_deadline_equal_the_unfolded_run(
        timeout: float | None) -> None:
    sc = _trace_l3(1000, timeout)
    folded = _run(sc, "L1+L2+L3", True)
    assert sum(rep.folder.before_deadline for rep in folded.replicas) >= 1
    _assert_same(folded, _run(sc, "L1+L2+L3", False))


def test_the_switch_off_folds_less_and_changes_nothing_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sc = _trace_l3(1000)
    on = _run(sc, "L1+L2+L3", True)
    monkeypatch.setattr(prefetch, "STILL_UNTIL_DEADLINE", False)
    off = _run(sc, "L1+L2+L3", True)
    assert sum(r.folder.before_deadline for r in off.replicas) == 0
    assert (sum(r.folder.folded_steps for r in on.replicas)
            > sum(r.folder.folded_steps for r in off.replicas))
    _assert_same(on, off)


def test_a_fold_waits_on_after_an_absorbed_step_ends_the_heads_prefetch() -> None:
    """Hypothesis found it (tests/sim/test_fault_properties.py): under L3 timeouts, a step
    the fold absorbs while it waits for the batch before it ends the head's prefetch, so no
    deadline is left to time the wait; the fold waits as the driver does (on the next
    completion only), and the run equals the unfolded one."""
    sc = Scenario.from_mapping({**FAULTS_BASE, "faults": [
        {"kind": "l3_timeout", "start": 1.4375, "end": 1.4375 + 0.875},
        {"kind": "l3_timeout", "start": 0.03125, "end": 0.03125 + 1.0}]})
    folded = _run(sc, "tiny", True)
    assert folded.requests == 24 and not folded.unfinished
    assert sum(rep.folder.before_deadline for rep in folded.replicas) >= 1
    _assert_same(folded, _run(sc, "tiny", False))
