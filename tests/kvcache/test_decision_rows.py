"""Each decision kind's own ``row`` equals the generic ``(kind, *fields)`` of Decision.row,
and every kind the module defines spells one out (a kind that forgets a field, swaps two
or names another kind fails here)."""

from __future__ import annotations

import dataclasses

import pytest

from hicache.kvcache import decisions
from hicache.kvcache.decisions import Decision

KINDS = [c for c in vars(decisions).values()
         if isinstance(c, type) and issubclass(c, Decision) and c is not Decision]


def _value(f: dataclasses.Field, i: int) -> object:
    return f"{f.name}-{i}" if f.type in ("str", "Literal['demote', 'delete']") else 100 + i


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.__name__)
def test_row_is_the_kind_then_every_field_in_order(cls: type[Decision]) -> None:
    assert "row" in vars(cls), f"{cls.__name__} uses the generic row"
    value = cls(*[_value(f, i) for i, f in enumerate(dataclasses.fields(cls))])
    row = value.row()
    assert row == Decision.row(value)
    assert row == (cls.kind, *dataclasses.astuple(value))
    assert len(set(row[1:])) == len(row) - 1  # distinct values: an order swap would show


def test_every_kind_is_checked() -> None:
    assert {c.__name__ for c in KINDS} == {
        "Admit", "Load", "Evict", "Backup", "Prefetch", "PrefetchStop", "Finish", "Reject"}
