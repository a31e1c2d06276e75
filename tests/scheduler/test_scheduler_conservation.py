"""Conservation: whatever the tier configuration, a run under memory pressure ends clean.

For every replica at the end of the run:

- every request that arrived has finished (a record with a ``finish`` time);
- no page leaked: on each tier, the runtime's free pages plus the pages the scheduler's
  radix tree still holds equal the pool's capacity (nothing else may hold a page once all
  requests are released);
- no request row is left open in the runtime;
- the bytes the PCIe link moved (per direction) equal the bytes the runtime accounted
  from page counts when it prepared loads and backups.

The scenario is sized so the device cache must evict (some ``('evict', ...)`` decisions),
otherwise the page bookkeeping under eviction would go untested.
"""

from __future__ import annotations

import pytest
from scheduler_scenarios import (
    L1_ONLY,
    L2_VARIANTS,
    L3_MOONCAKE,
    decision_counts,
    decisions,
    page_balance,
    scenario,
)

from sim.driver import simulate

VARIANTS = {
    "L1 only": L1_ONLY,
    **L2_VARIANTS,
    "L1+L2+L3 mooncake": {**L2_VARIANTS["L1+L2 write_through"], **L3_MOONCAKE},
}


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def result(request):
    return simulate(scenario(cache=VARIANTS[request.param]), name=request.param)


def test_memory_pressure_forces_eviction(result):
    assert decisions(result, "evict"), "device_tokens too large: nothing was evicted"


def test_every_request_finishes(result):
    assert result.requests > 0
    assert len(result.records) == result.requests
    unfinished = [r["rid"] for r in result.records if r["finish"] is None]
    assert unfinished == []
    counts = decision_counts(result)
    assert counts["admit"] == counts["finish"] == result.requests
    for rep in result.replicas:
        assert rep.scheduler.idle


def test_no_page_leaks_on_any_tier(result):
    for i, tiers in enumerate(page_balance(result)):
        for tier, (free, held, capacity) in tiers.items():
            assert free + held == capacity, (
                f"replica {i} {tier}: {free} free + {held} held by the tree != {capacity}")


def test_no_request_row_left_open(result):
    assert [rep.runtime.open_requests() for rep in result.replicas] == [0] * len(
        result.replicas)


def test_bytes_moved_equal_bytes_accounted(result):
    for rep in result.replicas:
        assert rep.runtime.bytes_moved == rep.runtime.bytes_accounted


def test_hierarchical_variants_really_use_the_host_tier(result):
    """Guards the test above from passing vacuously: with L2 on, bytes do cross PCIe."""
    hierarchical = result.name != "L1 only"
    moved = sum(sum(rep.runtime.bytes_moved.values()) for rep in result.replicas)
    assert (moved > 0) == hierarchical
