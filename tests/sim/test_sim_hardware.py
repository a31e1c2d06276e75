"""Hardware profiles and model presets load from YAML, and bad files fail loudly."""

from __future__ import annotations

import copy

import pytest
import yaml
from simtoys import TOY_PROFILE

from sim.hardware.model import load_model
from sim.hardware.profile import load_profile


def test_shipped_profiles_load_with_reference_figures() -> None:
    h100, h200 = load_profile("h100-sxm"), load_profile("h200-sxm")
    assert h100.gpu.bf16_flops == h200.gpu.bf16_flops == 989.0e12  # same dense bf16 peak
    assert h100.gpu.hbm_bytes_per_s == 2.9e12 and h200.gpu.hbm_bytes_per_s == 4.3e12
    assert h100.pcie.h2d_bytes_per_s == 55.0e9
    assert h100.pcie.bidirectional_bytes_per_s == 83.0e9  # not 2 x 55
    assert h100.mooncake is not None and h100.file is not None
    assert h100.file.shared is False  # a local file backend is private by default


def test_a_profile_can_come_from_a_path(tmp_path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**TOY_PROFILE, "name": "mine"}))
    assert load_profile(path).name == "mine"


@pytest.mark.parametrize("section,key", [("pcie", "h2d_bytes_per_s"), ("gpu", "bf16_flops")])
def test_missing_key_names_the_key(section: str, key: str) -> None:
    data = copy.deepcopy(TOY_PROFILE)
    del data[section][key]
    with pytest.raises(ValueError, match=f"{section}.{key}"):
        load_profile(data)


def test_bad_value_in_a_file_names_the_file_and_key(tmp_path) -> None:
    path = tmp_path / "broken.yaml"
    text = open(load_profile("h100-sxm").source).read()
    path.write_text(text.replace("copy_engines: 3", "copy_engines: three"))
    with pytest.raises(ValueError, match=r"broken\.yaml.*pcie\.copy_engines"):
        load_profile(path)


def test_unknown_profile_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="no-such-gpu"):
        load_profile("no-such-gpu")


def test_kv_bytes_per_token_match_reference() -> None:
    """docs/SOURCES.md §4: Llama-3-8B 128 KiB per token, Llama-3-70B 40 KiB per GPU at TP8."""
    assert load_model("llama-3-8b").kv_bytes_per_token() == 128 * 1024
    assert load_model("llama-3-70b-tp8").kv_bytes_per_token() == 40 * 1024
    assert load_model("llama-3-8b").kv_bytes_per_page(64) == {"full": 64 * 128 * 1024, "swa": 0}


def test_hybrid_preset_splits_kv_by_pool_and_has_mamba_state() -> None:
    m = load_model("hybrid-swa-mamba")
    assert {k: m.count(k) for k in ("full", "swa", "mamba")} == {"full": 4, "swa": 4, "mamba": 24}
    per_layer = 2 * 8 * 128 * 2
    assert m.kv_bytes_per_page(16) == {"full": 16 * per_layer * 4, "swa": 16 * per_layer * 4}
    assert m.kv_bytes_per_token_per_layer("mamba") == 0
    assert m.mamba_state_bytes_per_request() == 24 * m.mamba_state_bytes


def test_layer_list_must_match_num_layers() -> None:
    from simtoys import TOY_MODEL
    with pytest.raises(ValueError, match="layers"):
        load_model({**TOY_MODEL, "layers": ["full", "swa"]})
    with pytest.raises(ValueError, match=r"layers\[2\]: got 'moe'; allowed values"):
        load_model({**TOY_MODEL, "layers": ["full", "swa", "moe", "full"]})
