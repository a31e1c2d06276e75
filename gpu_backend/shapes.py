"""Model dimensions for the torch runtime: the shared :class:`hicache.modelspec.ModelSpec`.

The simulator (``sim.hardware.model``) and the torch runtime read the same spec, so they
agree on KV bytes and heads per rank by construction.
"""

from __future__ import annotations

from hicache.modelspec import ModelSpec

ModelShape = ModelSpec

__all__ = ["ModelShape"]
