"""Fixtures for the torch-runtime tests (CPU, tiny shapes)."""

from __future__ import annotations

import pytest

from gpu_backend.shapes import ModelShape


@pytest.fixture
def tiny() -> ModelShape:
    return ModelShape.tiny()
