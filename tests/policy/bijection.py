"""A check shared by the key-scheme tests: two key schemes name the same things."""

from __future__ import annotations


def assert_bijection(pairs: list[tuple[object, object]]) -> None:
    """Each key of one scheme goes with exactly one key of the other (equal iff equal)."""
    fwd: dict[object, object] = {}
    back: dict[object, object] = {}
    for a, b in pairs:
        assert fwd.setdefault(a, b) == b
        assert back.setdefault(b, a) == a
