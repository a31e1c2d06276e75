"""One message per bad input: ``where: key.path: problem, got X``.

:func:`format_errors` turns pydantic's errors (:class:`hicache.schema.adapters.SchemaErrors`)
into such lines, naming the file
and line (when the document's key lines are known), the dotted key, what was found and
what is allowed, with a did-you-mean for unknown keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import reprlib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the input edge passes pydantic's errors; importing this needs no pydantic
    from pydantic import ValidationError

    from hicache.schema.adapters import SchemaErrors

Loc = tuple[str | int, ...]
MAX_SHOWN = 10
_KEYED = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*): (.*)$", re.S)


class InputError(ValueError):
    """An input that cannot be used; the message starts with where it came from."""


def suggest(key: str, known: Sequence[str]) -> str:
    """``unknown key (did you mean 'x'?); allowed keys: ...``."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; allowed keys: {', '.join(sorted(known))}"


_REPR = reprlib.Repr()  # keyword arguments need Python 3.12
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 40


def short(v: Any, limit: int = 60) -> str:
    """A bounded repr: nested or aliased data never expands (a YAML alias bomb is cheap)."""
    text = _REPR.repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _fields(tp: Any) -> dict[str, Any] | None:
    tp = _unwrap(tp)
    if not isinstance(tp, type):
        return None
    if hasattr(tp, "model_fields"):  # a pydantic BaseModel
        return {n: f.annotation for n, f in tp.model_fields.items()}
    if dataclasses.is_dataclass(tp):
        from hicache.schema.plain import field_types

        return field_types(tp)
    return None


def _tag(tp: Any) -> Any:
    """The default of a ``kind`` field (a tagged union member's tag), else None."""
    f = getattr(tp, "__dataclass_fields__", {}).get("kind")
    return None if f is None else f.default


def _members(tp: Any) -> tuple[Any, ...]:
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(_unwrap(a) for a in typing.get_args(tp))
    return (tp,)


def fields_at(root: Any, loc: Loc) -> list[str] | None:
    """The field names of the model reached by ``loc`` from ``root`` (a tagged union's tag
    in ``loc`` picks its member), or None when ``loc`` leaves the models."""
    tp = root
    for part in loc:
        members = [m for m in _members(tp) if _fields(m) is not None]
        if isinstance(part, int):
            args = typing.get_args(_unwrap(tp))
            if not args:
                return None
            tp = args[0]
            continue
        step = None
        for m in members:
            fs = _fields(m) or {}
            if part in fs:
                step = fs[part]
                break
            if _tag(m) == part:
                step = m
                break
        if step is None:
            return None
        tp = step
    found = [_fields(m) for m in _members(tp) if _fields(m) is not None]
    return sorted(found[0]) if len(found) == 1 else None


def _problem(e: Mapping[str, Any], allowed: list[str] | None) -> str:
    t, ctx = e["type"], e.get("ctx") or {}
    got = f", got {short(e.get('input'))}"
    simple = {
        "int_type": "expected an integer", "int_parsing": "expected an integer",
        "int_from_float": "expected an integer", "float_type": "expected a number",
        "float_parsing": "expected a number", "finite_number": "expected a finite number",
        "bool_type": "expected true or false", "bool_parsing": "expected true or false",
        "string_type": "expected a string", "dict_type": "expected a mapping",
        "model_type": "expected a mapping", "dataclass_type": "expected a mapping",
        "dataclass_exact_type": "expected a mapping", "list_type": "expected a list",
        "tuple_type": "expected a list", "string_too_short": "expected a non-empty string",
        "none_required": "expected null",
    }
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if t == "missing":
        return "required"
    if t in ("extra_forbidden", "unexpected_keyword_argument"):
        key = str(e["loc"][-1]) if e["loc"] else "?"
        return suggest(key, allowed) if allowed else "unknown key"
    if t in ("value_error", "assertion_error"):
        return str(ctx.get("error", e["msg"]))
    if t == "literal_error":
        return f"got {short(e.get('input'))}; allowed values: {ctx.get('expected')}"
    if t == "union_tag_invalid":
        return f"unknown {ctx.get('discriminator')} {ctx.get('tag')!r}; allowed: " \
               f"{ctx.get('expected_tags')}"
    if t == "union_tag_not_found":
        return f"required key {ctx.get('discriminator')} is missing"
    if t in bounds:
        op, k = bounds[t]
        return f"expected a value {op} {ctx.get(k)}{got}"
    if t in simple:
        return simple[t] + got
    return f"{e['msg']}{got}"


def format_errors(err: SchemaErrors | ValidationError, *, source: str, root: Any = None,
                  prefix: Loc = (), lines: Mapping[Loc, int | str] | None = None,
                  clean_loc: Callable[[Loc], Loc] | None = None) -> list[str]:
    """One line per error: ``source[:line]: dotted.key: problem``. ``root`` is the
    validated type (for allowed keys), ``prefix`` the key path of the validated part
    inside the document, ``lines`` the document's key lines (or a label such as the
    ``--set`` item that gave the key), ``clean_loc`` drops union
    tags from a pydantic location."""
    out = []
    for e in getattr(err, "error", err).errors():
        raw = loc = tuple(e["loc"])
        if clean_loc is not None:
            loc = clean_loc(loc)
        if e["type"] == "value_error":  # "key: problem" from a validator names a sub-key
            m = _KEYED.match(str((e.get("ctx") or {}).get("error", "")))
            if m:
                loc = (*loc, *m.group(1).split("."))
                raw = (*raw, *m.group(1).split("."))
                e = {**e, "ctx": {"error": m.group(2)}}
        allowed = fields_at(root, raw[:-1]) if root is not None and raw else None
        full = (*prefix, *loc)
        where = source
        if lines:
            for n in range(len(full), 0, -1):
                if full[:n] in lines:
                    at = lines[full[:n]]
                    where = f"{source}:{at}" if isinstance(at, int) else f"{source} ({at})"
                    break
        key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in full)
        key = key.replace(".[", "[")
        problem = _problem({**e, "loc": loc}, allowed)
        out.append(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")
    if len(out) > MAX_SHOWN:
        out = [*out[:MAX_SHOWN], f"... and {len(out) - MAX_SHOWN} more problems"]
    return out
