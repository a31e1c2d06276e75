"""Faults with the real Mooncake store: its master killed or paused, its storage process
killed and restarted. Each test runs its own service, since it breaks it."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_backend.l3 import guard
from gpu_backend.l3.resilient import RetryPolicy
from gpu_backend.l3.service import MooncakeService, MooncakeUnavailable, find_binaries
from tests.l3.conftest import QUIET

pytestmark = pytest.mark.mooncake
PAGE = 64 << 10
POLICY = RetryPolicy(timeout_s=2.0, retries=0, cooldown_s=0.3, cooldown_max_s=1.0)


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MooncakeService]:
    try:
        find_binaries()
    except MooncakeUnavailable as exc:
        pytest.skip(f"Mooncake not installed: {exc}")
    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    with MooncakeService(segment_bytes=32 << 20, log_path=tmp_path / "svc.log") as svc:
        yield svc


def _keys(tag: str, n: int = 4) -> list[str]:
    return [f"{tag}{os.getpid():08x}{i:054x}" for i in range(n)]


def _pause(pid: int) -> None:
    """SIGSTOP ``pid`` and return once it is stopped (the signal lands asynchronously)."""
    os.kill(pid, signal.SIGSTOP)
    _until(lambda: Path(f"/proc/{pid}/stat").read_text().split()[2] in ("T", "t"), 5.0)


def _until(fn, timeout_s: float = 20.0):
    """Call ``fn`` until it returns something truthy (the store coming back)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out := fn():
            return out
        time.sleep(0.2)
    raise AssertionError(f"no success within {timeout_s} s")


def test_storage_death_makes_counted_misses_and_a_restart_brings_hits_back(
        service: MooncakeService, caplog: pytest.LogCaptureFixture) -> None:
    from gpu_backend.l3.mooncake import MooncakeL3

    client = MooncakeL3(service.master_address)
    l3 = guard(client, POLICY)
    try:
        before, after = _keys("aa"), _keys("bb")
        pages = [os.urandom(PAGE) for _ in before]
        assert l3.batch_set(before, pages) == [True] * 4
        assert [bytes(v) for v in l3.batch_get(before)] == pages
        service.kill_storage()
        with caplog.at_level(logging.WARNING, logger="hicache.l3"):
            # listed by the master, but its segment is gone: the read fails (or times out,
            # while the transfer engine retries the dead peer), counted and warned once
            assert l3.batch_get(before) == [None] * 4
        assert l3.faults.as_dict()["l3_errors"] >= 1
        assert any("get of 4 keys" in r.getMessage() or "unreadable" in r.getMessage()
                   for r in caplog.records)
        assert l3.batch_set(after, pages) == [False] * 4  # no storage to put into
        service.restart_storage()
        _until(lambda: all(l3.batch_set(after, pages)))
        assert [bytes(v) for v in l3.batch_get(after)] == pages  # hits resume
        assert l3.faults.as_dict()["l3_reconnects"] >= 1
    finally:
        client.close()


def test_a_restarted_master_brings_the_client_back(service: MooncakeService) -> None:
    """The master dies and comes back (its metadata lost): the same client answers again,
    without a new setup(), once the storage process has registered with the new master."""
    from gpu_backend.l3.mooncake import MooncakeL3

    client = MooncakeL3(service.master_address)
    l3 = guard(client, POLICY)
    try:
        keys = _keys("dd")
        pages = [os.urandom(PAGE) for _ in keys]
        assert l3.batch_set(keys, pages) == [True] * 4
        service.master_process.kill()
        service.master_process.wait(timeout=5)
        assert l3.batch_exists(keys) == [False] * 4  # an error (RPC_FAIL) or a timeout
        assert l3.faults.as_dict()["l3_errors"] >= 1 and l3.inner.down
        service.restart_master()
        _until(lambda: all(l3.batch_set(keys, pages)))  # the new master knows no key
        assert [bytes(v) for v in l3.batch_get(keys)] == pages
        assert l3.faults.as_dict()["l3_reconnects"] >= 1
    finally:
        client.close()


def test_a_paused_master_costs_bounded_timeouts_and_the_client_comes_back(
        service: MooncakeService) -> None:
    """SIGSTOP: the master's socket stays open and never answers (calls hang forever
    without a deadline; they release the GIL, so the caller is not blocked)."""
    from gpu_backend.l3.mooncake import MooncakeL3

    client = MooncakeL3(service.master_address)
    l3 = guard(client, POLICY)
    keys = _keys("cc")
    pages = [os.urandom(PAGE) for _ in keys]
    assert l3.batch_set(keys, pages) == [True] * 4
    _pause(service.master_process.pid)
    try:
        # keys the client never saw (it may answer for keys it just wrote from a cache)
        unknown = _keys("ce")
        assert l3.batch_exists(unknown) == [False] * 4
        assert l3.inner.down  # that call timed out and marked the store down
        for _ in range(5):
            assert l3.batch_exists(unknown) == [False] * 4
            assert l3.batch_get(keys) == [None] * 4  # skipped, or a probe that times out
        # every call above came back while the master stayed paused: timeouts and skips
        counts = l3.faults.as_dict()
        assert counts["l3_timeouts"] >= 1 and counts["l3_errors"] >= 1
        assert counts["l3_skipped"] >= 1
    finally:
        os.kill(service.master_process.pid, signal.SIGCONT)
    time.sleep(POLICY.cooldown_max_s)
    got = _until(lambda: (v := l3.batch_get(keys))[0] is not None and v)
    assert [bytes(v) for v in got] == pages
    assert l3.faults.as_dict()["l3_reconnects"] >= 1
    client.close()


def _multiturn(name: str) -> dict:
    return {"name": name, "seed": 5, "model": "llama-3-8b",
            "cache": {"page_size": 4, "device_tokens": 256, "enable_hierarchical_cache": True,
                      "hicache_ratio": 2.0, "hicache_write_policy": "write_through",
                      "hicache_storage_backend": "mooncake",
                      "hicache_storage_prefetch_policy": "wait_complete",
                      "hicache_storage_backend_extra_config": {"prefetch_threshold": 8}},
            "scheduler": {"overlap": False, "max_running_requests": 2},
            "workload": {"kind": "multiturn", "num_clients": 6, "num_rounds": 4,
                         "request_length": [24, 48], "output_length": [2, 4],
                         "request_rate": 8.0, "max_parallel": 6}}


@pytest.mark.parametrize("fault", ["kill", "storage",
                                   pytest.param("pause", marks=pytest.mark.slow)])
def test_losing_the_store_mid_run_loses_no_request(
        service: MooncakeService, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The issue's hang: the master dies (kill: calls fail after Mooncake's ~4 s RPC
    timeout) or stops answering (pause: calls never return), or the storage process dies
    (storage: its pages cannot be read, puts fail), while the run stores and prefetches.
    Every request still finishes, and the faults are counted. (pause: ~10 s, most of it
    closing the client, which waits for its hung calls: slow.)"""
    import gpu_backend.driver
    from gpu_backend.driver import run_scenario

    monkeypatch.setenv("MOONCAKE_MASTER", service.master_address)
    master = service.master_process
    hit = {"kill": master.kill, "storage": service.kill_storage,
           "pause": lambda: _pause(master.pid)}[fault]
    killer = threading.Timer(0.6, hit)
    make_l3 = gpu_backend.driver.make_l3

    def connected_then_timer(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        client = make_l3(*args, **kwargs)  # the fault hits a running client, not its setup
        killer.start()
        return client

    monkeypatch.setattr(gpu_backend.driver, "make_l3", connected_then_timer)
    try:
        res = run_scenario(_multiturn(f"master-{fault}"))
    finally:
        killer.cancel()
        if fault == "pause":
            assert master.poll() is None  # still there, still paused
            os.kill(master.pid, signal.SIGCONT)
    if fault != "pause":  # it did die during the run
        assert (master if fault == "kill" else service.storage_process).poll() is not None
    assert len(res.records) == res.requests == 24
    assert all(math.isfinite(r["finish"]) for r in res.records)
    faults = res.extra["l3_faults"]
    assert faults["l3_timeouts"] + faults["l3_errors"] >= 1
    assert faults["l3_skipped"] >= 1  # later L3 calls did not wait on the lost store


# --- a store that is down or hung when the client starts: a clear error, bounded ---------

def test_a_master_down_at_start_fails_clearly_in_milliseconds_not_90_s(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Mooncake's own setup() retries a missing master for ~90 s holding the GIL."""
    from gpu_backend.l3.mooncake import L3Unavailable, MooncakeL3
    from gpu_backend.l3.service import free_port

    try:
        find_binaries()
    except MooncakeUnavailable as exc:
        pytest.skip(f"Mooncake not installed: {exc}")
    master = f"127.0.0.1:{free_port()}"
    with pytest.raises(L3Unavailable, match=f"master {master} is not reachable"):
        MooncakeL3(master)  # the port probe's error: setup()'s 90 s of retries never ran


def test_a_paused_master_at_start_fails_at_the_setup_timeout(
        service: MooncakeService) -> None:  # fmt: skip
    """SIGSTOP: the port accepts connections, setup() would wait 30 s per attempt."""
    from gpu_backend.l3.mooncake import L3Unavailable, MooncakeL3

    _pause(service.master_process.pid)
    try:
        with pytest.raises(L3Unavailable, match="setup did not finish within 2 s"):
            MooncakeL3(service.master_address, setup_timeout_s=2.0)
    finally:
        os.kill(service.master_process.pid, signal.SIGCONT)
    client = MooncakeL3(service.master_address)  # resumed: the same address works
    keys = _keys("ee", 1)
    assert client.batch_set(keys, [b"x"]) == [True]
    client.close()


def test_the_torch_runtime_names_a_master_down_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
        ) -> None:  # fmt: skip
    import yaml

    from gpu_backend.l3.service import free_port
    from hicache.cli import main

    try:
        find_binaries()
    except MooncakeUnavailable as exc:
        pytest.skip(f"Mooncake not installed: {exc}")
    master = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("MOONCAKE_MASTER", master)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_multiturn("down-at-start")))
    rc = main(["measure", str(path), "--device", "cpu", "--no-calibrate", "--repeats", "1",
               "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert f"Mooncake master {master} is not reachable" in err and "Traceback" not in err
