"""Fixtures for L3 client tests: a real Mooncake service (module scope) and fresh keys."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gpu_backend.l3.service import MooncakeService, MooncakeUnavailable, find_binaries

QUIET = {"MC_LOG_LEVEL": "ERROR", "GLOG_minloglevel": "2"}


@pytest.fixture(scope="module")
def mooncake_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MooncakeService]:
    """A real mooncake_master + mooncake_client on loopback; skipped only without binaries."""
    try:
        find_binaries()
    except MooncakeUnavailable as exc:
        pytest.skip(f"Mooncake not installed: {exc}")
    log = tmp_path_factory.mktemp("mooncake") / "service.log"
    with pytest.MonkeyPatch.context() as mp:
        for name, value in QUIET.items():
            mp.setenv(name, value)
        with MooncakeService(segment_bytes=128 << 20, log_path=log) as svc:
            yield svc


@pytest.fixture
def keys() -> list[str]:
    """Eight page-hash-like keys that no other test uses (the store outlives a test)."""
    prefix = uuid.uuid4().hex
    return [f"{prefix}{i:032x}" for i in range(8)]


@pytest.fixture(scope="module")
def mooncake_l3(mooncake_service: MooncakeService) -> Iterator[object]:
    """One segment-less MooncakeL3 per module (closing a client costs ~1 s)."""
    from gpu_backend.l3.mooncake import MooncakeL3

    client = MooncakeL3(mooncake_service.master_address)
    yield client
    client.close()
