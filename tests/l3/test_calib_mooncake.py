"""calibrate's Mooncake measurement (gpu_backend.calib_l3) against the real local store: the
l3.mooncake section it writes loads as a profile the simulator uses."""

from __future__ import annotations

import copy

import pytest

from gpu_backend.calib_l3 import calibrate_mooncake, measure_mooncake
from gpu_backend.calibrate import BASE
from sim.hardware.profile import load_profile


def test_the_measurement_fits_latencies_and_a_throughput_per_concurrency(mooncake_l3) -> None:
    section, rows, notes = measure_mooncake(mooncake_l3, value_bytes=256 << 10,
                                            concurrency=(1, 2), keys_per_call=2,
                                            calls_per_thread=2)
    assert [r[0] for r in rows] == [1, 2] and all(len(r) == 5 for r in rows)
    assert all(r[1] > 1e6 and r[2] > 1e6 for r in rows)  # loopback: > 1 MB/s (here ~1 GB/s)
    assert 0 < section["master_rpc_s"] < 0.5 and 0 < section["latency_s"] < 0.5
    assert section["nic_bytes_per_s"] == max(r[1] for r in rows)
    assert section["nodes"] == 1 and set(notes) == set(section)


def test_a_store_given_by_address_becomes_the_profiles_l3_section(mooncake_service) -> None:
    prof, src = copy.deepcopy(BASE), {}
    calibrate_mooncake(prof, src, master=mooncake_service.master_address, local=False,
                       value_bytes=64 << 10)
    spec = load_profile(prof).mooncake
    assert spec is not None and spec.nodes == 1
    assert spec.nic_bytes_per_s == prof["l3"]["mooncake"]["nic_bytes_per_s"] != 23.75e9
    assert spec.capacity_bytes == BASE["l3"]["mooncake"]["capacity_bytes"]  # not measured
    assert src["l3.mooncake.latency_s"].startswith("measured")
    assert len(prof["calibrated"]["l3_mooncake"]["rows"]) == 4


def test_the_calibrate_flags_are_exclusive() -> None:
    from hicache.cli import main

    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--mooncake-local", "--mooncake-master", "127.0.0.1:1"])
    assert e.value.code == 2
