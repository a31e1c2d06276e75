"""Plain typed data: frozen standard dataclasses, checked without a validation library.

    @dataclass(frozen=True)
    class CacheConfig(Plain):                 # Plain: __post_init__ runs conform(self)
        page_size: Annotated[int, Integer(ge=1)] = 64

    conform(obj)          check (and normalise) every field against its annotation
    build(Type, data)     the trusted constructor: plain data (``to_mapping()``, JSON) ->
                          nested dataclasses, tuples for lists; then each ``__init__`` checks
    to_plain(obj)         dataclasses -> dicts, tuples kept (what ``build`` reads back)

The input edge validates with pydantic (which reads the same annotations and markers, see
:mod:`hicache.schema.constraints`), and pydantic also calls ``__post_init__``, so a config
that exists is valid however it was made. ``conform`` understands what the configs use:
markers, ``Literal``, ``X | None`` and unions of dataclasses, ``tuple[X, ...]``,
``tuple[X, Y]``, dicts, nested dataclasses (by type: they checked themselves) and the
strict scalars. Errors are ``ValueError("key: problem")``, the form pydantic's location
handling (:func:`hicache.schema.errors.format_errors`) splits into a key path.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from hicache.schema.constraints import Marker, got

FORBID_EXTRA: dict[str, Any] = {"extra": "forbid"}  # pydantic config, a plain dict


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """``{field name: annotation (with Annotated extras)}`` of a dataclass, resolved."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def split(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """``Annotated[X, m1, m2]`` -> ``(X, (m1, m2))``; anything else -> ``(tp, ())``."""
    metas: tuple[Any, ...] = ()
    while typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        tp, metas = args[0], (*args[1:], *metas)
    return tp, metas


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _name(tp: Any) -> str:
    tp = split(tp)[0]
    args = _union_args(tp)
    if args:
        return " or ".join(_name(a) for a in args)
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _hint(v: Any) -> str:
    if isinstance(v, Mapping):
        return " (plain data is validated at the input edge: Scenario.from_mapping)"
    return ""


def conform_value(tp: Any, v: Any) -> Any:
    """``v`` checked against annotation ``tp`` (normalised where a marker says so)."""
    tp, metas = split(tp)
    for m in metas:
        if isinstance(m, Marker):
            v = m.check(v)
    if tp is Any:
        return v
    if dataclasses.is_dataclass(tp):
        if not isinstance(v, tp):
            raise ValueError(f"expected a {tp.__name__}{got(v)}{_hint(v)}")
        return v
    args = _union_args(tp)
    if args is not None:
        if v is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        errors = []
        for member in members:
            try:
                return conform_value(member, v)
            except ValueError as e:
                errors.append(str(e))
        if len(members) == 1:
            raise ValueError(errors[0] + (" (or null)" if len(args) > 1 else ""))
        raise ValueError(f"expected {_name(tp)}{got(v)}{_hint(v)}")
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if not any(v == a and type(v) is type(a) for a in allowed):
            raise ValueError(f"got {v!r}; allowed values: {', '.join(map(repr, allowed))}")
        return v
    if origin is tuple:
        return _tuple(tp, v)
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(v, Mapping):
            raise ValueError(f"expected a mapping{got(v)}")
        return v
    return _scalar(tp, v)


def _tuple(tp: Any, v: Any) -> tuple:
    if not isinstance(v, tuple | list):
        raise ValueError(f"expected a list{got(v)}")
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        out = tuple(conform_value(args[0], x) for x in v)
    else:
        if len(v) != len(args):
            raise ValueError(f"expected a list of {len(args)} items{got(v)}")
        out = tuple(conform_value(a, x) for a, x in zip(args, v, strict=True))
    same = isinstance(v, tuple) and all(a is b for a, b in zip(out, v, strict=True))
    return v if same else out


def _scalar(tp: Any, v: Any) -> Any:
    if tp is bool or tp is str:
        ok = isinstance(v, tp)
    elif tp is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif tp is float:
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        v = float(v) if ok else v
    elif isinstance(tp, type):
        ok = isinstance(v, tp)
    else:
        return v  # an annotation conform does not know is trusted
    if not ok:
        raise ValueError(f"expected {_name(tp)}{got(v)}")
    return v


def conform(obj: Any) -> None:
    """Check every field of dataclass ``obj`` (in place: normalised values are set)."""
    for name, tp in field_types(type(obj)).items():
        v = getattr(obj, name)
        try:
            new = conform_value(tp, v)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        if new is not v:
            object.__setattr__(obj, name, new)


class Plain:
    """Mixin of the config dataclasses: unknown keys are refused when pydantic validates,
    and every construction (direct, trusted :func:`build`, pydantic) conforms the fields.
    A subclass with cross-field invariants calls ``super().__post_init__()`` first."""

    __pydantic_config__ = FORBID_EXTRA

    def __post_init__(self) -> None:
        conform(self)


def _kind(tp: Any) -> Any:
    f = getattr(tp, "__dataclass_fields__", {}).get("kind")
    return None if f is None else f.default


def build(tp: Any, data: Any) -> Any:
    """The trusted constructor: ``data`` (plain mappings, lists, scalars, as ``to_plain``
    or JSON gives them) as a value of annotation ``tp``. No coercion beyond structure: the
    data was validated where it was written, and each dataclass checks itself on
    construction. Unknown keys raise ValueError naming the type."""
    tp, _ = split(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(data, tp):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping for {tp.__name__}{got(data)}")
        fields = field_types(tp)
        unknown = [k for k in data if k not in fields]
        if unknown:
            raise ValueError(f"{tp.__name__}: unknown keys {unknown}")
        kwargs = {}
        for k, v in data.items():
            try:
                kwargs[k] = build(fields[k], v)
            except ValueError as e:
                raise ValueError(f"{k}: {e}") from None
        try:
            return tp(**kwargs)
        except TypeError as e:  # a required key is missing
            raise ValueError(f"{tp.__name__}: {e}") from None
    args = _union_args(tp)
    if args is not None:
        if data is None and type(None) in args:
            return None
        classes = [a for a in (split(a)[0] for a in args) if dataclasses.is_dataclass(a)]
        if classes and isinstance(data, Mapping):
            tagged = [c for c in classes if _kind(c) is not None]
            if tagged:
                pick = [c for c in tagged if _kind(c) == data.get("kind")]
                if not pick:
                    raise ValueError(f"unknown kind {data.get('kind')!r}; allowed: "
                                     f"{[_kind(c) for c in tagged]}")
                return build(pick[0], data)
            if len(classes) == 1:
                return build(classes[0], data)
        return data
    if typing.get_origin(tp) is tuple and isinstance(data, list | tuple):
        items = typing.get_args(tp)
        if len(items) == 2 and items[1] is Ellipsis:
            return tuple(build(items[0], x) for x in data)
        if len(items) == len(data):
            return tuple(build(a, x) for a, x in zip(items, data, strict=True))
    return data


def to_plain(obj: Any) -> Any:
    """Dataclasses as dicts (recursively), tuples and lists as they are, dicts copied."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return type(obj)(to_plain(x) for x in obj)
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
