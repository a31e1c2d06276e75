"""Fixtures for the simulator tests (toy hardware and model from simtoys)."""

from __future__ import annotations

import pytest
import simpy
from simtoys import toy_model, toy_profile

from sim.hardware.model import ModelPreset
from sim.hardware.profile import HardwareProfile


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.fixture
def profile() -> HardwareProfile:
    return toy_profile()


@pytest.fixture
def model() -> ModelPreset:
    return toy_model()
