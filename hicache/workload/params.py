"""Validation of workload parameters and the shared random draws.

Every checker raises ``ValueError`` whose message names the key and what is allowed, and
returns the normalised value. Lengths are ``int`` or ``[lo, hi]`` (uniform integer in
``[lo, hi]``) and normalise to a ``(lo, hi)`` tuple.
"""

from __future__ import annotations

import math
import random
from typing import Any

LengthSpec = int | tuple[int, int]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def int_param(name: str, v: Any, minimum: int = 0) -> int:
    if not _is_int(v) or v < minimum:
        raise ValueError(f"key {name!r}: expected an integer >= {minimum}, got {v!r}")
    return v


def optional_int_param(name: str, v: Any, minimum: int = 0) -> int | None:
    return None if v is None else int_param(name, v, minimum)


def bool_param(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"key {name!r}: expected true or false, got {v!r}")
    return v


def float_param(name: str, v: Any, minimum: float = 0.0) -> float:
    if not _is_number(v) or not math.isfinite(v) or v < minimum:
        raise ValueError(f"key {name!r}: expected a finite number >= {minimum}, got {v!r}")
    return float(v)


def rate_param(name: str, v: Any) -> float:
    """Requests per second: a number > 0, or inf / "inf" (everything at time 0)."""
    if v == "inf":
        return math.inf
    if not _is_number(v) or math.isnan(v) or v <= 0:
        raise ValueError(f"key {name!r}: expected a rate > 0 (req/s) or 'inf', got {v!r}")
    return float(v)


def length_param(name: str, v: Any, minimum: int = 1) -> tuple[int, int]:
    if _is_int(v) and v >= minimum:
        return (v, v)
    if (
        isinstance(v, list | tuple)
        and len(v) == 2
        and all(_is_int(x) for x in v)
        and minimum <= v[0] <= v[1]
    ):
        return (v[0], v[1])
    raise ValueError(
        f"key {name!r}: expected an integer >= {minimum} or a range [lo, hi] with "
        f"{minimum} <= lo <= hi, got {v!r}"
    )


def float_range_param(name: str, v: Any) -> tuple[float, float]:
    if _is_number(v):
        lo = hi = float_param(name, v)
    elif isinstance(v, list | tuple) and len(v) == 2:
        lo, hi = (float_param(name, x) for x in v)
    else:
        lo, hi = 1.0, 0.0
    if lo > hi:
        raise ValueError(f"key {name!r}: expected a number >= 0 or [lo, hi], got {v!r}")
    return (lo, hi)


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
