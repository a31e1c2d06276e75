"""Types of workload parameters (for the plain config dataclasses) and shared draws.

Lengths are ``int`` or ``[lo, hi]`` (uniform integer in ``[lo, hi]``) and normalise to a
``(lo, hi)`` tuple; rates are a number > 0 or ``inf`` (everything at time 0). Scalar types
(``PosInt``, ``NonNegFloat``, ...) come from :mod:`hicache.schema.types`.
"""

from __future__ import annotations

import math
import random
from typing import Annotated, Any

from hicache.schema.constraints import JsonSchema, Parse
from hicache.schema.errors import short
from hicache.schema.types import MAX_COUNT

LengthSpec = int | tuple[int, int]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _integral(v: Any) -> Any:
    return int(v) if isinstance(v, float) and math.isfinite(v) and v == int(v) else v


def _length(minimum: int) -> Any:
    def check(v: Any) -> tuple[int, int]:
        v = _integral(v)
        if _is_int(v) and minimum <= v <= MAX_COUNT:
            return (v, v)
        if isinstance(v, list | tuple) and len(v) == 2:
            lo, hi = (_integral(x) for x in v)
            if _is_int(lo) and _is_int(hi) and minimum <= lo <= hi <= MAX_COUNT:
                return (lo, hi)
        raise ValueError(f"expected an integer >= {minimum} or a range [lo, hi] with "
                         f"{minimum} <= lo <= hi, got {short(v)}")

    return check


def _float(v: Any) -> float | None:
    """``v`` as a float, or None when it is no number (an int beyond any float is none)."""
    try:
        return float(v) if _is_number(v) else None
    except OverflowError:
        return None


def _rate(v: Any) -> float:
    f = math.inf if v == "inf" else _float(v)
    if f is None or math.isnan(f) or f <= 0:
        raise ValueError(f"expected a rate > 0 (req/s) or 'inf', got {short(v)}")
    return f


def _float_range(v: Any) -> tuple[float, float]:
    def ok(x: Any) -> bool:
        f = _float(x)
        return f is not None and math.isfinite(f) and f >= 0

    if ok(v):
        return (float(v), float(v))
    if isinstance(v, list | tuple) and len(v) == 2 and all(map(ok, v)) and v[0] <= v[1]:
        return (float(v[0]), float(v[1]))
    raise ValueError(f"expected a number >= 0 or [lo, hi] with 0 <= lo <= hi, got {short(v)}")


_RANGE_SCHEMA = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}


def Length(minimum: int = 1) -> Any:  # noqa: N802 - a type factory
    """A length in tokens: an int, or ``[lo, hi]`` (uniform in [lo, hi]) -> ``(lo, hi)``."""
    return Annotated[tuple[int, int], Parse(_length(minimum)), JsonSchema(
        {"anyOf": [{"type": "integer", "minimum": minimum}, _RANGE_SCHEMA]})]


Rate = Annotated[float, Parse(_rate), JsonSchema(
    {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "inf"}]})]
FloatRange = Annotated[tuple[float, float], Parse(_float_range), JsonSchema(
    {"anyOf": [{"type": "number", "minimum": 0},
               {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}]})]
# pydantic config of the workload dataclasses (a plain dict): unknown keys are errors and
# defaults are normalised too (a length default 512 becomes (512, 512))
WORKLOAD_CONFIG = {"extra": "forbid", "validate_default": True}


def draw_length(rng: random.Random, spec: tuple[int, int]) -> int:
    lo, hi = spec
    return lo if lo == hi else rng.randint(lo, hi)


def draw_float(rng: random.Random, spec: tuple[float, float]) -> float:
    lo, hi = spec
    return lo if lo == hi else rng.uniform(lo, hi)


def poisson_arrivals(rng: random.Random, n: int, rate: float) -> list[float]:
    """``n`` arrival times of a Poisson process of ``rate`` req/s; the first is at 0.

    Gaps are i.i.d. exponential with mean ``1 / rate``; ``rate == inf`` puts all at 0.
    """
    if math.isinf(rate):
        return [0.0] * n
    out, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        out.append(t)
    return out
