"""Model preset for the simulator: the shared :class:`hicache.modelspec.ModelSpec`.

``load_model`` reads a preset name (``scenarios/models/NAME.yaml``), a path or a mapping.
"""

from __future__ import annotations

from hicache.modelspec import KINDS, KV_KINDS, ModelSpec, load_model_spec

ModelPreset = ModelSpec
load_model = load_model_spec

__all__ = ["KINDS", "KV_KINDS", "ModelPreset", "load_model"]
