"""Overlap: with ``scheduler.overlap`` the next batch's loads run under this batch's compute.

The scheduler plans batch N+1 while batch N is in flight, and the runtime starts N+1's
H2D loads at prepare time, so some ``(lane h2d, op load)`` rows of a batch start before
the compute of the previous computing batch ends. Without overlap no load may start
before the previous batch's compute has ended (the plan is made after its completion).

Layer-wise loading lets compute of layer i wait only for layer i's copy, so more of
the load time is hidden under compute (``load_hidden_fraction`` from
:func:`hicache.report.metrics.summarize`) than with ``run.layerwise: false``, where
compute waits for every layer's load before starting.
"""

from __future__ import annotations

import pytest
from scheduler_scenarios import scenario

from hicache.report.frames import requests_frame, timeline_frame
from hicache.report.metrics import summarize
from sim.driver import simulate


def _run(overlap: bool, layerwise: bool):  # noqa: ANN202
    return simulate(scenario(scheduler={"overlap": overlap}, run={"layerwise": layerwise}))


def loads_started_under_previous_compute(timeline) -> list:  # noqa: ANN001
    """Load rows of batch N+1 that start before the compute of the previous batch ends."""
    compute_end: dict[int, float] = {}
    for row in timeline.rows:
        if row.lane == "compute":
            compute_end[row.batch] = max(compute_end.get(row.batch, row.end), row.end)
    computing = sorted(compute_end)
    early = []
    for row in timeline.rows:
        if row.lane != "h2d" or row.op != "load":
            continue
        prev = [b for b in computing if b < row.batch]
        if prev and row.start < compute_end[prev[-1]]:
            early.append(row)
    return early


@pytest.fixture(scope="module")
def runs():
    return {(ov, lw): _run(ov, lw) for ov in (True, False) for lw in (True, False)}


def _loads(result) -> list:  # noqa: ANN001
    return [r for r in result.replicas[0].timeline.rows if r.lane == "h2d" and r.op == "load"]


def test_overlap_starts_next_batch_loads_under_current_compute(runs):
    result = runs[(True, True)]
    assert _loads(result), "scenario has no load-backs: nothing to overlap"
    assert loads_started_under_previous_compute(result.replicas[0].timeline)


def test_without_overlap_loads_wait_for_previous_compute(runs):
    result = runs[(False, True)]
    assert _loads(result)
    assert loads_started_under_previous_compute(result.replicas[0].timeline) == []


@pytest.mark.parametrize("overlap", [True, False])
def test_layerwise_hides_more_load_time(runs, overlap):
    def hidden(layerwise: bool) -> float:
        r = runs[(overlap, layerwise)]
        s = summarize(requests_frame(r.records), timeline_frame(r.replicas[0].timeline))
        assert s["load_hidden_fraction"] is not None
        return s["load_hidden_fraction"]

    assert hidden(True) > hidden(False)
