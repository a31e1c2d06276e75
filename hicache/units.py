"""One parser for every size a user types: token counts, byte sizes, request counts.

    parse_size("4e6") == parse_size("4M") == 4_000_000      # decimal SI suffixes
    parse_size("512Ki") == 524_288                           # binary IEC suffixes
    parse_size("64GiB") == parse_size("64Gi") == 64 << 30    # a trailing B is allowed
    parse_size("1_000") == 1000

Invariant: the result is an exact non-negative integer within ``[minimum, 2**63)``; a value
that is not a whole number (``1.5`` tokens, ``1.5Ki`` is 1536 and fine), NaN, infinity,
negative, or a suffix we do not know raises :class:`SizeError` naming what was typed.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from fractions import Fraction

SUFFIXES: dict[str, int] = {
    "": 1,
    "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}  # fmt: skip
MAX = 2**63 - 1
_PATTERN = re.compile(
    r"\s*([-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)?)"
    r"\s*([A-Za-z]*?)B?\s*")


class SizeError(ValueError):
    """A size the user typed that is not a whole, finite number in range."""


def parse_size(text: str | int, *, minimum: int = 0, what: str = "size") -> int:
    """``text`` as an exact integer (see the module docstring for the accepted forms)."""
    if isinstance(text, bool):
        raise SizeError(f"{what}: expected a number, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        m = _PATTERN.fullmatch(str(text))
        if not m or m.group(2) not in SUFFIXES:
            raise SizeError(f"{what}: {text!r} is not a size; write a whole number with an "
                            f"optional suffix: 4e6, 4M, 512Ki, 64GiB (suffixes "
                            f"{', '.join(s for s in SUFFIXES if s)})")
        number = Fraction(m.group(1).replace("_", "")) * SUFFIXES[m.group(2)]
        if number.denominator != 1:
            raise SizeError(f"{what}: {text!r} is not a whole number ({float(number):g})")
        value = int(number)
    if value < minimum:
        raise SizeError(f"{what}: {text!r} must be >= {minimum}")
    if value > MAX:
        raise SizeError(f"{what}: {text!r} is too large (at most {MAX:.3g})")
    return value


def size_arg(minimum: int = 0) -> Callable[[str], int]:
    """An argparse ``type=`` for one size (errors become argparse's usage errors)."""
    def convert(text: str) -> int:
        try:
            return parse_size(text, minimum=minimum, what="value")
        except SizeError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value: ")) from None
    convert.__name__ = "size"  # argparse names the type in its messages
    return convert


def size_list_arg(minimum: int = 0) -> Callable[[str], list[int]]:
    """An argparse ``type=`` for a comma list of sizes: ``2e5,1M,4Mi``."""
    one = size_arg(minimum)

    def convert(text: str) -> list[int]:
        parts = [p for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected one or more sizes, got {text!r}")
        return [one(p) for p in parts]
    convert.__name__ = "size list"
    return convert


def format_size(n: int | float, *, binary: bool = False) -> str:
    """A short human form: ``4000000 -> '4M'``, with ``binary`` ``524288 -> '512Ki'``."""
    steps = ("Ki", "Mi", "Gi", "Ti", "Pi") if binary else ("K", "M", "G", "T", "P")
    base = 1024 if binary else 1000
    value, unit = float(n), ""
    for step in steps:
        if abs(value) < base:
            break
        value, unit = value / base, step
    return f"{value:.4g}{unit}"
