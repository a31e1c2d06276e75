"""The GPU check's scenarios travel resolved (the GPU machine has no pydantic): the
committed scenarios/validation/gpu_*.resolved.json are what resolving the YAML gives now,
they load without pydantic, and their host pools stay within a few GiB of pinned memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hicache.scenario import load_scenario, write_resolved

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("transfer_bound", "compute_bound", "layerwise")


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_resolved_scenario_is_current(name, tmp_path):
    src = ROOT / "scenarios" / "validation" / f"gpu_{name}.yaml"
    committed = json.loads(src.with_name(f"gpu_{name}.resolved.json").read_text())
    write_resolved(load_scenario(src), tmp_path / "r.json")
    fresh = json.loads((tmp_path / "r.json").read_text())
    fresh["source"] = committed["source"]  # where it was resolved from: a relative path
    assert fresh == committed, (f"scenarios/validation/gpu_{name}.resolved.json is stale: "
                                f"python -m hicache.scenario resolve {src.relative_to(ROOT)} "
                                f"scenarios/validation/gpu_{name}.resolved.json")


def test_they_load_without_pydantic_and_pin_a_few_gib():
    code = ("import sys; sys.modules['pydantic'] = None\n"
            "from hicache.scenario import load_scenario\n"
            f"for n in {NAMES!r}:\n"
            "    sc = load_scenario(f'scenarios/validation/gpu_{n}.resolved.json')\n"
            "    kv = sc.model.kv_bytes_per_token()\n"
            "    print(n, sc.model.vocab_size, sc.cache.host_tokens(kv) * kv / 2**30)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    for line in r.stdout.splitlines():
        name, vocab, pinned_gib = line.split()
        assert int(vocab) == 128256 and float(pinned_gib) <= 3.0, line
