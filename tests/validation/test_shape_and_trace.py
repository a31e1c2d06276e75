"""validate warns when the scenario's model shape differs from the profile's
``calibrated.shape`` (stderr and ``warnings`` in comparison.json), and passes a
torch-profiler trace request (``run.torch_profiler`` / ``--torch-trace``) to the first
measured run only: the simulator never sees the key."""

from __future__ import annotations

import copy
import json
import math

import yaml

from gpu_backend.calibrate import BASE
from gpu_backend.shapes import ModelShape
from hicache.cli import main
from sim.hardware.profile import load_profile
from validation.runner import shape_warnings, sim_scenario

TINY = ModelShape.tiny()


def profile(shape: dict | None, tables: bool = True) -> dict:
    p = copy.deepcopy(BASE)
    if tables:
        p["calibrated"] = {"device": "cpu", "prefill_layer": [[16, 1e-4]]}
        if shape is not None:
            p["calibrated"]["shape"] = shape
    return p


def test_same_shape_no_warning_and_each_differing_key_is_named():
    mine = TINY.to_mapping()
    assert shape_warnings(load_profile(profile(mine)), mine) == []
    other = {**mine, "num_layers": 8, "layers": ["full"] * 8}
    (w,) = shape_warnings(load_profile(profile(other)), mine)
    assert "num_layers: profile 8, scenario 4" in w and "layers:" in w


def test_tables_without_a_recorded_shape_warn_and_no_tables_do_not():
    (w,) = shape_warnings(load_profile(profile(None)), TINY.to_mapping())
    assert "no calibrated.shape" in w
    assert shape_warnings(load_profile(profile(None, tables=False)), TINY.to_mapping()) == []


def test_the_simulator_scenario_runs_the_profile_and_the_measured_shape(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile(TINY.to_mapping())))
    d = {"name": "x", "workload": {"kind": "agent"},
         "run": {"layerwise": True, "torch_profiler": "x.json"}}
    sc = sim_scenario(d, tmp_path / "p.yaml", TINY.to_mapping())
    assert sc.model == TINY and sc.hardware == str(tmp_path / "p.yaml")
    assert sc.run.torch_profiler is None and sc.run.layerwise  # torch-only key dropped
    assert d["run"]["torch_profiler"] == "x.json"  # the input is not changed


def test_validate_warns_on_a_shape_mismatch_and_writes_the_trace(tmp_path, capsys):
    other = {**TINY.to_mapping(), "name": "bigger", "hidden_size": 128}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile(other)))
    scenario = {"name": "mini", "seed": 1,
                "cache": {"page_size": 16, "device_tokens": 1024},
                "run": {"torch_profiler": str(tmp_path / "key.json")},
                "workload": {"kind": "multiturn", "num_clients": 2, "num_rounds": 1,
                             "request_length": [32, 32], "output_length": [2, 2],
                             "request_rate": math.inf}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    out = tmp_path / "out"
    rc = main(["validate", str(tmp_path / "s.yaml"), "--profile", str(tmp_path / "p.yaml"),
               "--device", "cpu", "--out", str(out), "--torch-trace", str(tmp_path / "t.json"),
               "--repeats", "1"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "validate: warning:" in err and "hidden_size: profile 128, scenario 64" in err
    cmp = json.loads((out / "mini" / "comparison.json").read_text())
    assert len(cmp["warnings"]) == 1 and "hidden_size" in cmp["warnings"][0]
    # --torch-trace wins over the scenario key
    run0 = json.loads((out / "measured" / "mini" / "run0" / "run.json").read_text())
    assert run0["torch_trace"] == str(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    assert not (tmp_path / "key.json").exists()
