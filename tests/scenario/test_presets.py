"""Preset lookup: bundled names, paths relative to the file that names them, installed
package data before the checkout, and errors that list what exists."""

from __future__ import annotations

from pathlib import Path

import pytest

import hicache.presets as presets
from hicache.modelspec import load_model_spec
from hicache.presets import data_root, find_preset, is_name, known, read_preset
from hicache.scenario import Scenario, load_scenario
from hicache.schema.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_the_repository_scenarios_folder():
    assert data_root() == ROOT / "scenarios"
    assert {"quick", "mooncake_trace"} <= set(known("scenarios"))
    assert {"h100-sxm", "h200-sxm"} <= set(known("hardware"))
    assert "llama-3-8b" in known("models")


def test_installed_package_data_wins_over_a_checkout(tmp_path, monkeypatch):
    pkg = tmp_path / "hicache"
    (pkg / "_bundled" / "models").mkdir(parents=True)
    (pkg / "_bundled" / "models" / "only-here.yaml").write_text("x: 1\n")
    monkeypatch.setattr(presets, "_PACKAGE", pkg)
    assert data_root() == pkg / "_bundled" and known("models") == ["only-here"]
    monkeypatch.setattr(presets, "_PACKAGE", tmp_path / "nowhere" / "hicache")
    with pytest.raises(InputError, match="installation is incomplete"):
        data_root()


def test_names_are_presets_and_anything_else_is_a_path(tmp_path):
    assert is_name("h100-sxm") and not is_name("h100-sxm.yaml") and not is_name("a/b")
    assert not is_name("..") and not is_name("")
    assert find_preset("hardware", "h100-sxm") == ROOT / "scenarios/hardware/h100-sxm.yaml"
    (tmp_path / "m.yaml").write_text("x: 1\n")
    assert find_preset("models", "m.yaml", base=tmp_path) == tmp_path / "m.yaml"
    with pytest.raises(InputError, match=r"hardware 'h999': no such preset; known: .*h100-sxm"):
        find_preset("hardware", "h999")
    with pytest.raises(InputError, match=rf"looked at {tmp_path}/nope.yaml"):
        find_preset("models", "nope.yaml", base=tmp_path)


def test_paths_inside_a_scenario_resolve_against_its_folder(tmp_path, monkeypatch):
    (tmp_path / "presets").mkdir()
    spec = load_model_spec("llama-3-8b").to_mapping() | {"name": "mine", "num_layers": 2,
                                                         "layers": "full"}
    import yaml
    (tmp_path / "presets" / "mine.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "s.yaml").write_text("name: s\nmodel: presets/mine.yaml\n"
                                     "workload: {kind: agent}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the cwd does not matter
    s = load_scenario(tmp_path / "s.yaml")
    assert s.model.name == "mine" and s.model.num_layers == 2
    # an override's path is relative to the cwd, as a shell user expects
    (elsewhere / "other.yaml").write_text(yaml.safe_dump(spec | {"name": "other"}))
    assert load_scenario(tmp_path / "s.yaml", ["model=other.yaml"]).model.name == "other"


def test_a_bundled_scenario_loads_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load_scenario("quick")
    assert isinstance(s, Scenario) and s.name == "quick" and s.base_dir == ROOT / "scenarios"
    with pytest.raises(InputError, match="scenario 'quik': no such preset; known: .*quick"):
        load_scenario("quik")


def test_a_preset_file_must_hold_a_mapping_and_every_reader_says_which(tmp_path):
    """One reader (read_preset) serves the hardware loader and a dotted --set into a
    named profile: a file whose top level is a list fails in both, naming the file."""
    from sim.hardware.loader import resolve

    bad = tmp_path / "listy.yaml"
    bad.write_text("- 1\n- 2\n")
    data, source = read_preset("hardware", "h100-sxm")
    assert data["name"] == "h100-sxm" and source.endswith("h100-sxm.yaml")
    with pytest.raises(InputError, match=r"listy\.yaml: top level must be a mapping, got list"):
        read_preset("hardware", bad)
    with pytest.raises(InputError, match=r"listy\.yaml: top level must be a mapping"):
        resolve(bad, "hardware")
    sc = tmp_path / "s.yaml"
    sc.write_text((ROOT / "scenarios" / "quick.yaml").read_text())
    with pytest.raises(InputError, match=r"hardware\.gpu\.memory_bytes.*listy\.yaml: top "
                                         r"level must be a mapping"):
        load_scenario(sc, [f"hardware={bad}", "hardware.gpu.memory_bytes=1"])
