"""Strict scalar types for the input schema (pydantic annotated types).

    Int     an int, or a float with no fraction (``1e12`` in YAML); never a bool or "32"
    Float   a finite int or float; never a bool, NaN or infinity
    Bool    true or false only ("maybe", 1 and "yes" are errors)
    Str     a string only

``int_(ge=1)`` and ``float_(gt=0)`` add bounds; bounds go before the coercing validator so
they appear as ``minimum`` / ``exclusiveMinimum`` in the JSON Schema.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, Strict

# Sizes beyond this are typos, not plans (2**62 tokens is ~4.6e18); keeps ints machine-sized.
MAX_COUNT = 2**62


def _integral(v: Any) -> Any:
    """``4e6`` -> 4000000; other values pass through to the strict int check."""
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    return v


def int_(*, ge: int | None = None, gt: int | None = None, le: int = MAX_COUNT) -> Any:
    """An integer type with bounds (default upper bound :data:`MAX_COUNT`)."""
    return Annotated[int, Field(ge=ge, gt=gt, le=le), Strict(), BeforeValidator(_integral)]


def float_(*, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Any:
    """A finite number type with bounds (ints are accepted and become floats)."""
    return Annotated[float, Field(ge=ge, gt=gt, le=le, lt=lt, allow_inf_nan=False), Strict()]


Int = int_()
NonNegInt = int_(ge=0)
PosInt = int_(ge=1)
Float = float_()
NonNegFloat = float_(ge=0.0)
PosFloat = float_(gt=0.0)
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
NonEmptyStr = Annotated[str, Strict(), Field(min_length=1)]
