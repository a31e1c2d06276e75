"""Hardware and model descriptions loaded from YAML (scenarios/hardware, scenarios/models)."""

from sim.hardware.model import ModelPreset, load_model
from sim.hardware.profile import HardwareProfile, load_profile

__all__ = ["HardwareProfile", "ModelPreset", "load_model", "load_profile"]
