"""MooncakeL3 against a real master + storage client: sharing, persistence, env config."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpu_backend.l3 import service
from gpu_backend.l3.mooncake import MooncakeL3, config_from_env, parse_size
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
