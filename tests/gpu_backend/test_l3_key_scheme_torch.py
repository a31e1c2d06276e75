"""The torch runtime's L3 stores are real: its schedulers key pages with SGLang's SHA-256
hex whatever ``cache.l3_key_scheme`` says (the simulator's chain64 default included), and
the runtime refuses any other key, naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_backend import driver
from gpu_backend.l3_protocol import MemoryL3
from hicache.runtime.interface import BatchPlan, PrefetchIntent
from tests.gpu_backend.builders import make_runtime


def test_int_keys_are_refused_naming_the_scheme() -> None:
    with make_runtime(l3=MemoryL3()) as rt, pytest.raises(ValueError, match="l3_key_scheme"):
        rt.prepare_batch(BatchPlan(1, prefetches=(PrefetchIntent((1, 2), 4, 1, job_id=9),)))


def test_a_chain64_scenario_runs_with_sha256_keys(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "trace.jsonl"  # Mooncake block prompts: chain64 would key them by int
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]},
            {"timestamp": 100, "input_length": 1100, "output_length": 2, "hash_ids": [1, 2, 3]}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = MemoryL3()
    monkeypatch.setattr(driver, "make_l3", lambda cache, directory: store)
    d = {"name": "keys", "seed": 0, "model": "llama-3-8b",
         "cache": {"page_size": 64, "device_tokens": 4096, "enable_hierarchical_cache": True,
                   "hicache_storage_backend": "file", "l3_key_scheme": "chain64"},
         "scheduler": {"overlap": False},
         "workload": {"kind": "trace", "path": str(trace), "format": "mooncake"}}
    res = driver.run_scenario(d)
    assert not res.unfinished and store.data
    assert all(type(k) is str and len(k) == 64 for k in store.data)
