"""MooncakeL3 against a real master + storage client: sharing, persistence, env config."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpu_backend.l3 import service
from gpu_backend.l3.mooncake import MooncakeL3, config_from_env, config_from_extra, parse_size
from gpu_backend.l3.service import MooncakeService, MooncakeUnavailable, find_binaries, free_port

PAGE = 64 << 10


def test_missing_master_variable_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="MOONCAKE_MASTER"):
        config_from_env({"MOONCAKE_PROTOCOL": "tcp"})


def test_env_defaults_follow_sglang_with_a_segmentless_client() -> None:
    cfg = config_from_env({"MOONCAKE_MASTER": "127.0.0.1:50051"})
    assert cfg["master"] == "127.0.0.1:50051"
    assert cfg["metadata_server"] == "P2PHANDSHAKE"
    assert cfg["protocol"] == "tcp" and cfg["device"] == ""
    assert cfg["global_segment_bytes"] == 0


def test_env_sizes_accept_bytes_and_units() -> None:
    cfg = config_from_env({"MOONCAKE_MASTER": "h:1", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "4gb",
                           "MOONCAKE_PROTOCOL": "rdma", "MOONCAKE_DEVICE": "mlx5_0"})
    assert cfg["global_segment_bytes"] == 4 << 30
    assert (cfg["protocol"], cfg["device"]) == ("rdma", "mlx5_0")
    assert parse_size("4294967296") == parse_size("4 GB") == parse_size(4 << 30)
    assert parse_size("512MB") == parse_size("512 MiB") == 512 << 20
    with pytest.raises(ValueError):
        parse_size("lots")


def test_extra_config_with_a_master_wins_over_the_environment_key_by_key() -> None:
    """SGLang's choice: master_server_address in the extra config selects it; each key it
    leaves out falls back to its MOONCAKE_* variable."""
    env = {"MOONCAKE_MASTER": "env:1", "MOONCAKE_PROTOCOL": "rdma", "MOONCAKE_DEVICE": "mlx5_0",
           "MOONCAKE_LOCAL_BUFFER_SIZE": "128mb"}
    cfg = config_from_extra({"master_server_address": "extra:2", "protocol": "tcp",
                             "global_segment_size": 1 << 30, "setup_timeout": 3.0}, env)
    assert cfg["master"] == "extra:2" and cfg["protocol"] == "tcp"
    assert cfg["global_segment_bytes"] == 1 << 30 and cfg["setup_timeout_s"] == 3.0
    assert cfg["device"] == "mlx5_0" and cfg["local_buffer_bytes"] == 128 << 20


def test_extra_config_without_a_master_uses_the_environment_but_keeps_its_timeout() -> None:
    env = {"MOONCAKE_MASTER": "env:1"}
    cfg = config_from_extra({"protocol": "rdma", "setup_timeout": 2.5}, env)
    assert cfg == {**config_from_env(env), "setup_timeout_s": 2.5}  # protocol: env's, as SGLang
    with pytest.raises(ValueError, match="MOONCAKE_MASTER"):
        config_from_extra({"protocol": "tcp"}, {})


def test_a_scenario_names_its_master_and_setup_timeout_in_the_extra_config(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The torch runtime reaches the master the scenario names, with no MOONCAKE_MASTER,
    and a down master fails with the probe's error naming that address."""
    from gpu_backend.driver import make_l3
    from gpu_backend.l3.mooncake import L3Unavailable
    from hicache.config import CacheConfig

    try:
        find_binaries()
    except MooncakeUnavailable as exc:
        pytest.skip(f"Mooncake not installed: {exc}")
    monkeypatch.delenv("MOONCAKE_MASTER", raising=False)
    master = f"127.0.0.1:{free_port()}"
    cache = CacheConfig(enable_hierarchical_cache=True, hicache_storage_backend="mooncake",
                        hicache_storage_backend_extra_config={
                            "master_server_address": master, "setup_timeout": 1.0})
    with pytest.raises(L3Unavailable, match=f"master {master} is not reachable"):
        make_l3(cache, "")
    no_master = CacheConfig(enable_hierarchical_cache=True, hicache_storage_backend="mooncake")
    with pytest.raises(ValueError, match="master_server_address or the environment"):
        make_l3(no_master, "")


@pytest.mark.mooncake
def test_the_extra_config_master_serves_a_round_trip(
        mooncake_service: MooncakeService, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("MOONCAKE_MASTER", raising=False)
    client = MooncakeL3.from_extra_config(
        {"master_server_address": mooncake_service.master_address, "setup_timeout": 5.0})
    key = f"ab{os.getpid():08x}{0:054x}"
    assert client.batch_set([key], [b"page"]) == [True]
    assert client.batch_get([key]) == [b"page"]
    client.close()


@pytest.mark.mooncake
def test_a_64_page_round_trip_is_shared_between_clients(
    mooncake_service: MooncakeService, mooncake_l3: MooncakeL3, keys: list[str]
) -> None:
    page_keys = [f"{keys[0][:32]}{i:032x}" for i in range(64)]
    pages = [os.urandom(PAGE) for _ in page_keys]
    t0 = time.monotonic()
    assert all(mooncake_l3.batch_set(page_keys, pages))
    t1 = time.monotonic()
    assert mooncake_l3.batch_get(page_keys) == pages
    t2 = time.monotonic()
    print(f"64 x 64 KiB: set {t1 - t0:.3f} s, get {t2 - t1:.3f} s")
    assert mooncake_l3.batch_exists(page_keys) == [True] * 64


@pytest.mark.mooncake
def test_data_outlives_the_client_that_wrote_it(
    mooncake_service: MooncakeService, mooncake_l3: MooncakeL3, keys: list[str]
) -> None:
    """Segment-less writers: pages live in the long-lived mooncake_client's segment."""
    env = mooncake_service.env()
    writer = MooncakeL3.from_env(env)
    [value] = [os.urandom(PAGE)]
    assert writer.batch_set(keys[:1], [value]) == [True]
    writer.close()
    assert mooncake_l3.batch_get(keys[:1]) == [value]


@pytest.mark.mooncake
def test_get_larger_than_the_local_buffer_is_split(
    mooncake_service: MooncakeService, keys: list[str]
) -> None:
    """A fresh client does not know the page size; reads past its buffer are retried."""
    small = MooncakeL3(mooncake_service.master_address, local_buffer_bytes=1 << 20)
    many = [f"{keys[1][:32]}{i:032x}" for i in range(40)]  # 40 x 64 KiB = 2.5 MiB > 1 MiB
    pages = [os.urandom(PAGE) for _ in many]
    assert all(small.batch_set(many, pages))
    reader = MooncakeL3(mooncake_service.master_address, local_buffer_bytes=1 << 20)
    assert reader.batch_get(many) == pages
    small.close()
    reader.close()


@pytest.mark.mooncake
def test_service_runs_on_loopback_and_stops_its_processes(
    mooncake_service: MooncakeService, tmp_path: Path
) -> None:
    assert mooncake_service.master_address.startswith("127.0.0.1:")
    assert mooncake_service.startup_s < 10
    with MooncakeService(segment_bytes=16 << 20, log_path=tmp_path / "svc.log") as svc:
        pids = svc.pids
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    assert svc.pids == [] and not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead; Popen.wait reaped ours, so this is belt and braces
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.mooncake
def test_no_master_fails_setup_with_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                  mooncake_service: MooncakeService) -> None:
    """~4.5 s: one setup retry against a port where nothing listens."""
    monkeypatch.setenv("MC_STORE_CLIENT_SETUP_RETRIES", "1")
    with pytest.raises(RuntimeError, match="is mooncake_master running"):
        MooncakeL3(f"127.0.0.1:{free_port()}")


def test_absent_binaries_name_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(service.shutil, "which", lambda name: None)
    with pytest.raises(MooncakeUnavailable, match="pip install mooncake-transfer-engine-non-cuda"):
        find_binaries()
