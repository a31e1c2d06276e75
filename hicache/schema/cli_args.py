"""Command-line numbers, checked like scenario keys (type, range, finiteness).

    p.add_argument("--l2-tokens", type=count(minimum=0))   "4e6" ok; "-100", "inf", "1.5" not
    p.add_argument("--capacity-tokens", type=count_list(minimum=1))   "1e5,1e6"

Errors are ``argparse.ArgumentTypeError`` naming the value and what is allowed, so
argparse prints ``argument --l2-tokens: ...`` and exits 2 before anything runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from hicache.schema.types import MAX_COUNT


def _count(text: str, minimum: int) -> int:
    raw = text.strip().replace("_", "")
    try:
        value = int(raw)
    except ValueError:
        try:
            f = float(raw)
        except ValueError:
            f = math.nan
        if not math.isfinite(f) or f != int(f):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number (write 4000000 or 4e6)") from None
        value = int(f)
    if not minimum <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a whole number >= {minimum} (and <= 2**62)")
    return value


def count(minimum: int = 0) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum`` (``4e6`` allowed)."""
    def parse(text: str) -> int:
        return _count(text, minimum)

    parse.__name__ = "count"  # argparse names the type in some messages
    return parse


def count_list(minimum: int = 0) -> Callable[[str], list[int]]:
    """An argparse type: a comma list of whole numbers >= ``minimum``."""
    def parse(text: str) -> list[int]:
        items = [v for v in text.split(",") if v.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r}: expected one or more numbers")
        return [_count(v, minimum) for v in items]

    parse.__name__ = "count list"
    return parse
