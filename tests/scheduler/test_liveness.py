"""Liveness: every issued request finishes or is rejected on arrival with a reason; a run
that cannot make progress stops with a diagnosis and the command exits non-zero.

Each reproduction of issue 10's first bullet is a test here (the torch-runtime ones are in
tests/gpu_backend/test_liveness_torch.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hicache.cli import main
from hicache.config import CacheConfig
from hicache.kvcache.manager import KVCacheManager
from hicache.runtime.handles import Kind, Tier
from hicache.runtime.interface import RuntimeInfo
from hicache.scheduler.scheduler import Scheduler, SchedulerConfig
from hicache.workload.request import Request
from sim.driver import simulate

# quick.yaml's cache and scheduler, one variant
QUICK_CACHE = {"page_size": 64, "device_tokens": 40000, "hicache_ratio": 1.5,
               "hicache_write_policy": "write_through", "hicache_io_backend": "kernel",
               "hicache_storage_prefetch_policy": "timeout"}


def scenario(workload: dict, cache: dict | None = None, scheduler: dict | None = None) -> dict:
    return {"name": "live", "seed": 0, "model": "llama-3-8b", "hardware": "h100-sxm",
            "cache": dict(QUICK_CACHE, **(cache or {})),
            "scheduler": {"max_running_requests": 32, "chunked_prefill_size": 8192,
                          **(scheduler or {})},
            "workload": {"kind": "multiturn", "num_clients": 4, "num_rounds": 12,
                         "request_length": 4096, "output_length": 32, "request_rate": 16,
                         "max_parallel": 24, **workload}}


def accounted(res) -> tuple[int, int, int]:  # noqa: ANN001
    finished = sum(r["finish"] is not None for r in res.records)
    return res.requests, finished, len(res.rejected)


def test_conversations_outgrowing_l1_are_rejected_and_the_rest_finish() -> None:
    """4096-token turns x 12 rounds: contexts outgrow quick.yaml's L1 (40000 tokens) from
    round 10 on. Before: 40 of 48 issued, 36 finished, exit 0."""
    res = simulate(scenario({}))
    issued, finished, rejected = accounted(res)
    assert issued == 48 and finished + rejected == 48 and not res.unfinished
    assert rejected == 12  # rounds 10, 11 and 12 of the 4 clients
    assert {r.split(":")[0] for r in res.rejected.values()} == {"exceeds_l1"}
    for r in res.records:
        needs = -(-(r["prompt_tokens"] + r["output_tokens"]) // 64)
        assert (r["rejected"] is not None) == (needs > 40000 // 64)


def test_a_request_larger_than_l1_is_rejected_not_stranded() -> None:
    """request_length 50000 (> 40000 tokens of L1): before, 0 of 4 finished, exit 0."""
    res = simulate(scenario({"request_length": 50000, "num_rounds": 1}))
    assert accounted(res) == (4, 0, 4) and not res.unfinished
    assert all("L1 holds 625" in r for r in res.rejected.values())


def test_max_running_requests_zero_fails_before_running_or_rejects() -> None:
    """A scenario refuses it up front; a Scheduler built directly rejects every request."""
    with pytest.raises(ValueError, match="max_running_requests"):
        simulate(scenario({"num_rounds": 2}, scheduler={"max_running_requests": 0}))
    info = RuntimeInfo("r", 0, 64, {Kind.FULL: 625}, {Kind.FULL: 0})
    sched = Scheduler(CacheConfig(page_size=64, device_tokens=40000), info,
                      SchedulerConfig(max_running_requests=0))
    step = sched.step(0.0, [Request(0, 0.0, list(range(100)), 4)])
    assert step.rejected == (0,) and not step.plans and sched.idle
    assert sched.records()[0]["rejected"].startswith("no_running_slots")


def test_buffer_only_does_not_strand_a_request_that_fits() -> None:
    """The reproduction: page 4, 1536 device tokens, 10 clients x 3 rounds of 223 + 31
    tokens, best_effort, max_parallel 1. Before: 23 issued, 22 finished (a best_effort
    prefetch that completed after admission pinned an L1 node forever)."""
    d = scenario({"num_clients": 10, "num_rounds": 3, "request_length": 223,
                  "output_length": 31, "max_parallel": 1, "request_rate": 16},
                 cache={"page_size": 4, "device_tokens": 1536,
                        "enable_hierarchical_cache": True, "hicache_ratio": 2,
                        "hicache_storage_backend": "mooncake", "hicache_buffer_only": True,
                        "hicache_storage_prefetch_policy": "best_effort"})
    res = simulate(d)
    assert accounted(res) == (30, 30, 0) and not res.unfinished
    assert any(d[1] == "prefetch_stop" and d[3] == "best_effort" for d in res.decisions)
    tree = res.replicas[0].scheduler.tree
    assert not any(n.locks for n in tree.nodes.values()), "a lock outlived its request"


def test_the_command_names_rejections_and_counts_them_in_the_summary(
        tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({})))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "12 request(s) rejected, exceeds_l1" in text
    summary = json.loads((out / "live" / "summary.json").read_text())
    assert summary["n_rejected"] == 12 and summary["n_unfinished"] == 0
    assert summary["rejected_by_reason"] == {"exceeds_l1": 12}
    csv = (out / "live" / "requests.csv").read_text().splitlines()
    assert csv[0].endswith(",rejected")
    assert sum("exceeds_l1" in line for line in csv[1:]) == 12


@pytest.fixture
def admission_never_succeeds(monkeypatch):  # noqa: ANN001, ANN201
    """A policy bug that blocks the queue head forever (nothing else can change that)."""
    monkeypatch.setattr(KVCacheManager, "admit", lambda self, st: False)


@pytest.mark.usefixtures("admission_never_succeeds")
def test_a_stall_stops_with_a_diagnosis_instead_of_ending_early() -> None:
    res = simulate(scenario({"num_clients": 2, "num_rounds": 1, "request_length": 512}))
    assert set(res.unfinished) == {0, 1}
    assert res.stall is not None and "queue head: request 0" in res.stall
    assert all(why.startswith("stalled") for why in res.unfinished.values())


@pytest.mark.usefixtures("admission_never_succeeds")
def test_a_stalled_run_exits_non_zero_naming_the_requests(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({"num_clients": 2, "num_rounds": 1,
                                             "request_length": 512})))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "ERROR: 2 request(s) did not finish (rid 0, 1): stalled" in err
    summary = json.loads((tmp_path / "o" / "live" / "summary.json").read_text())
    assert summary["n_unfinished"] == 2 and "queue head" in summary["stall"]


def test_a_stall_diagnosis_names_a_broken_tree_invariant() -> None:
    """The seed study's stall looked like a full L1 (the tree's page count had leaked):
    the diagnosis checks the tree and says when its accounting is broken."""
    info = RuntimeInfo("r", 0, 64, {Kind.FULL: 625}, {Kind.FULL: 0})
    sched = Scheduler(CacheConfig(page_size=64, device_tokens=40000), info,
                      SchedulerConfig(max_running_requests=4))
    sched.step(0.0, [Request(0, 0.0, list(range(100)), 4)])
    assert "tree invariant broken" not in sched.diagnose()
    sched.tree.residency.held[(Tier.DEVICE, Kind.FULL)] = 7
    assert "tree invariant broken (a bug, not a capacity limit): residency.held" in \
        sched.diagnose()


def test_a_run_cut_by_max_sim_time_says_so_and_exits_non_zero(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    d = scenario({"num_clients": 2, "num_rounds": 4, "request_length": 512})
    d["run"] = {"max_sim_time": 0.05}
    res = simulate(d)
    assert res.unfinished and res.stall is None
    assert all("max_sim_time" in why for why in res.unfinished.values())
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(d))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 1
    assert "max_sim_time" in capsys.readouterr().err
