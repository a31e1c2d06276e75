"""Field constraints as ``typing.Annotated`` markers: plain Python, pydantic on demand.

    page_size: Annotated[int, Integer(ge=1, le=1 << 20)] = 64
    rate:      Annotated[float, Parse(_rate), JsonSchema({...})] = 1.0

A marker says what a field accepts once, for two readers:

- pydantic (the input edge, :mod:`hicache.scenario`) calls ``__get_pydantic_core_schema__``
  (and ``__get_pydantic_json_schema__``); pydantic is imported inside those hooks only, so
  the JSON Schema, the error types and the messages come from pydantic;
- :func:`hicache.schema.plain.conform` (every config dataclass's ``__post_init__``) calls
  :meth:`Marker.check`, so a config built directly in Python, or rebuilt from a resolved
  scenario without pydantic, is held to the same rule.

Importing this module needs only the standard library. ``check`` and the pydantic schema
of each marker accept the same values and normalise them alike (``1e6`` -> ``1000000``);
``tests/scenario/test_constraints.py`` holds them to that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from hicache.schema.errors import short

# Sizes beyond this are typos, not plans (2**62 tokens is ~4.6e18); keeps ints machine-sized.
MAX_COUNT = 2**62


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def integral(v: Any) -> Any:
    """``4e6`` -> 4000000 (YAML writes big counts as floats); other values pass through."""
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    return v


def got(v: Any) -> str:
    """``, got X`` (bounded) for messages."""
    return f", got {short(v)}"


class Marker:
    """Base of the markers: ``check`` is the plain-Python rule (identity by default)."""

    def check(self, v: Any) -> Any:
        return v

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if v is not None)
        return f"{type(self).__name__}({args})"


def _bounds_problem(v: float, ge: Any, gt: Any, le: Any, lt: Any) -> str | None:
    for op, bound, ok in ((">=", ge, lambda: v >= ge), (">", gt, lambda: v > gt),
                          ("<=", le, lambda: v <= le), ("<", lt, lambda: v < lt)):
        if bound is not None and not ok():
            return f"expected a value {op} {bound}"
    return None


class Integer(Marker):
    """A strict integer (never a bool or ``"32"``; an integral float such as ``1e12`` is
    read as an int) within bounds; ``le`` defaults to :data:`MAX_COUNT`."""

    def __init__(self, *, ge: int | None = None, gt: int | None = None,
                 le: int | None = MAX_COUNT) -> None:
        self.ge, self.gt, self.le = ge, gt, le

    def check(self, v: Any) -> int:
        v = integral(v)
        if not _is_int(v):
            raise ValueError(f"expected an integer{got(v)}")
        problem = _bounds_problem(v, self.ge, self.gt, self.le, None)
        if problem:
            raise ValueError(problem + got(v))
        return v

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        inner = cs.int_schema(ge=self.ge, gt=self.gt, le=self.le, strict=True)
        return cs.no_info_before_validator_function(integral, inner)


class Number(Marker):
    """A finite number (an int is read as a float; never a bool, NaN or infinity)."""

    def __init__(self, *, ge: float | None = None, gt: float | None = None,
                 le: float | None = None, lt: float | None = None) -> None:
        self.ge, self.gt, self.le, self.lt = ge, gt, le, lt

    def check(self, v: Any) -> float:
        try:
            f = float(v) if _is_number(v) else None
        except OverflowError:  # an int beyond any float
            f = None
        if f is None:
            raise ValueError(f"expected a number{got(v)}")
        if not math.isfinite(f):
            raise ValueError(f"expected a finite number{got(v)}")
        problem = _bounds_problem(f, self.ge, self.gt, self.le, self.lt)
        if problem:
            raise ValueError(problem + got(v))
        return f

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        return cs.float_schema(ge=self.ge, gt=self.gt, le=self.le, lt=self.lt,
                               allow_inf_nan=False, strict=True)


class Flag(Marker):
    """``true`` or ``false`` only ("maybe", 1 and "yes" are errors)."""

    def check(self, v: Any) -> bool:
        if not isinstance(v, bool):
            raise ValueError(f"expected true or false{got(v)}")
        return v

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        return cs.bool_schema(strict=True)


class Text(Marker):
    """A string only (``non_empty``: at least one character)."""

    def __init__(self, *, non_empty: bool = False) -> None:
        self.non_empty = non_empty

    def check(self, v: Any) -> str:
        if not isinstance(v, str):
            raise ValueError(f"expected a string{got(v)}")
        if self.non_empty and not v:
            raise ValueError(f"expected a non-empty string{got(v)}")
        return v

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        return cs.str_schema(strict=True, min_length=1 if self.non_empty else None)


class Parse(Marker):
    """A pure conversion that both readers run first (a length ``512`` -> ``(512, 512)``):
    ``fn`` returns the normalised value or raises ValueError. ``edge`` (optional) replaces
    ``fn`` when pydantic validates, where it may use pydantic for better messages."""

    def __init__(self, fn: Callable[[Any], Any], *, edge: Callable[[Any], Any] | None = None
                 ) -> None:
        self.fn, self.edge = fn, edge

    def check(self, v: Any) -> Any:
        return self.fn(v)

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        return cs.no_info_before_validator_function(self.edge or self.fn, handler(source))


class Before(Marker):
    """An edge-only conversion before pydantic validates the field (load a model preset
    named by the field, resolve a path against the scenario's folder); ``with_info``
    passes pydantic's ValidationInfo (``info.context``). Plain Python construction expects
    the converted value already (``check`` is the identity)."""

    def __init__(self, fn: Callable[..., Any], *, with_info: bool = False) -> None:
        self.fn, self.with_info = fn, with_info

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        if self.with_info:
            return cs.with_info_before_validator_function(self.fn, handler(source))
        return cs.no_info_before_validator_function(self.fn, handler(source))


class After(Marker):
    """An edge-only check after pydantic validated the field (a trace file exists)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        return cs.no_info_after_validator_function(self.fn, handler(source))


class ByKind(Marker):
    """A union of tagged dataclasses: pydantic picks the member by its ``kind`` field (a
    discriminated union; :func:`hicache.schema.plain.build` picks it the same way)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from typing import Annotated

        from pydantic import Field

        return handler.generate_schema(Annotated[source, Field(discriminator="kind")])


class JsonSchema(Marker):
    """The field's JSON Schema, given (a mapping) or built when the schema is generated (a
    callable, which may import pydantic). ``also`` keeps the generated schema and adds
    these alternatives: ``{"anyOf": [*also, generated]}``."""

    def __init__(self, schema: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
                 *, also: tuple[Mapping[str, Any], ...] = ()) -> None:
        self.schema, self.also = schema, also

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> Any:
        if self.schema is None:
            return {"anyOf": [*(dict(a) for a in self.also), handler(core_schema)]}
        schema = self.schema() if callable(self.schema) else self.schema
        return _copy(schema)


def _copy(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_copy(x) for x in v]
    return v
