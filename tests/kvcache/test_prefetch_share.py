"""The arrival-time L3 prefetch share of L2 (``scheduler.prefetch_share``) and what a
prefetch over it does (``scheduler.prefetch_over_share``: ``wait`` = ours, ``skip`` =
SGLang's ``prefetch_rate_limited``, hicache/kvcache/prefetch.py).

16 clients x 4 rounds outgrow 8K device + 16K host tokens, so L3 holds what L2 lost and
every later round asks it; under ``timeout`` the stop policy decides per request.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))
from scheduler_scenarios import L3_MOONCAKE, decisions, scenario  # noqa: E402

from hicache.config import ConfigError  # noqa: E402
from hicache.scenario import as_scenario  # noqa: E402
from sim.driver import simulate  # noqa: E402

WIDE = {"num_clients": 16, "num_rounds": 4, "request_length": 1024, "output_length": 8,
        "request_rate": 8}
CACHE = {"device_tokens": 8192, "hicache_ratio": 2, **L3_MOONCAKE,
         "hicache_storage_prefetch_policy": "timeout"}


def _run(**sched):  # noqa: ANN003, ANN202
    return simulate(scenario(workload=WIDE, cache=CACHE, scheduler=sched or None))


def _prefetches(result) -> dict[int, int]:  # noqa: ANN001
    per_request: dict[int, int] = {}
    for d in decisions(result, "prefetch"):
        per_request[d[1]] = per_request.get(d[1], 0) + 1
    return per_request


@pytest.mark.parametrize("key,value,words", [
    ("prefetch_share", 0, "prefetch_share"), ("prefetch_share", 1.5, "prefetch_share"),
    ("prefetch_over_share", "never", "prefetch_over_share")])
def test_bad_values_are_refused_naming_the_key(key, value, words) -> None:  # noqa: ANN001
    with pytest.raises((ConfigError, ValueError), match=words):
        as_scenario(scenario(workload=WIDE, cache=CACHE, scheduler={key: value}))


def test_the_default_is_the_old_behaviour() -> None:
    """Unset keys and the defaults written out give the same run, decision for decision."""
    assert _run().decisions == _run(prefetch_share=0.25, prefetch_over_share="wait").decisions


def test_the_share_reaches_the_prefetcher() -> None:
    """A share of 5% and of all of L2 decide differently (more requests wait for the
    queue head with the smaller one); both finish every request."""
    small, large = _run(prefetch_share=0.05), _run(prefetch_share=1.0)
    assert sum(_prefetches(large).values()) > 0
    assert small.decisions != large.decisions
    assert not small.unfinished and not large.unfinished


def test_skip_never_retries_a_prefetch_over_the_share() -> None:
    """A tiny share: an arrival's prefetch starts only when none is held; the ones that
    arrive while one runs are skipped for good, where under wait each prefetches at the
    queue head instead (measured: 48 of 64 under skip, all 64 under wait)."""
    sglang = {"prefetch_share": 0.01, "requery_lost_prefix": False}  # no re-ask either
    wait, skip = _run(**sglang), _run(**sglang, prefetch_over_share="skip")
    n_wait, n_skip = _prefetches(wait), _prefetches(skip)
    assert n_skip and max(n_skip.values()) == 1
    assert sum(n_skip.values()) <= len(n_wait) - 8, (len(n_skip), len(n_wait))
    assert not skip.unfinished and len(skip.records) == len(wait.records)


def test_skip_with_room_prefetches_on_arrival_as_wait_does() -> None:
    """The whole of L2 as the share: nothing is over it, so skip loses no prefetch."""
    wait, skip = _run(prefetch_share=1.0), _run(prefetch_share=1.0, prefetch_over_share="skip")
    assert sum(_prefetches(skip).values()) >= 0.8 * sum(_prefetches(wait).values())
