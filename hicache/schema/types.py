"""Strict scalar types for configs and the input schema (``Annotated`` markers, no library).

    Int     an int, or a float with no fraction (``1e12`` in YAML); never a bool or "32"
    Float   a finite int or float; never a bool, NaN or infinity
    Bool    true or false only ("maybe", 1 and "yes" are errors)
    Str     a string only

``int_(ge=1)`` and ``float_(gt=0)`` add bounds, which the JSON Schema shows as ``minimum`` /
``exclusiveMinimum``. The markers (:mod:`hicache.schema.constraints`) are enforced by
pydantic at the input edge and by :func:`hicache.schema.plain.conform` everywhere else.
"""

from __future__ import annotations

from typing import Annotated, Any

from hicache.schema.constraints import MAX_COUNT, Flag, Integer, Number, Text

__all__ = ["MAX_COUNT", "Bool", "Float", "Int", "NonEmptyStr", "NonNegFloat", "NonNegInt",
           "PosFloat", "PosInt", "Str", "float_", "int_"]


def int_(*, ge: int | None = None, gt: int | None = None, le: int = MAX_COUNT) -> Any:
    """An integer type with bounds (default upper bound :data:`MAX_COUNT`)."""
    return Annotated[int, Integer(ge=ge, gt=gt, le=le)]


def float_(*, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Any:
    """A finite number type with bounds (ints are accepted and become floats)."""
    return Annotated[float, Number(ge=ge, gt=gt, le=le, lt=lt)]


Int = int_()
NonNegInt = int_(ge=0)
PosInt = int_(ge=1)
Float = float_()
NonNegFloat = float_(ge=0.0)
PosFloat = float_(gt=0.0)
Bool = Annotated[bool, Flag()]
Str = Annotated[str, Text()]
NonEmptyStr = Annotated[str, Text(non_empty=True)]
