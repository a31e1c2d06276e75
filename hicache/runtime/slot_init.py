"""Frozen dataclasses built at slot speed.

``@slot_init`` over ``@dataclass(frozen=True, slots=True)`` replaces the generated
``__init__`` (an ``object.__setattr__`` call by name per field, which a frozen class
needs to get past its own ``__setattr__``) by one that sets each slot through its
descriptor. Invariant: the same signature (positional or keyword, the same defaults, the
same annotations), the same ``__post_init__`` call, so the very same values; equality,
hashing, ``repr``, pickling and ``dataclasses.replace`` stay the dataclass's own. For
classes built many times per simulated batch (plans, completions, extents, the tree's
actions, the decision log); a class with a ``default_factory``, ``kw_only`` or
``InitVar`` field is refused (not needed, so not written).

:func:`slot_builder` goes further for the hottest call sites: a function that builds the
very value ``cls(...)`` builds (same parameters, defaults, ``__post_init__``) without the
class call (``type.__call__``, then ``__init__`` through its slot) and without a C call
per field: it fills an instance of a private subclass that adds no slots and keeps
``object``'s own ``__setattr__`` and ``__delattr__`` (so each field is a plain slot
store), then makes it a ``cls`` by ``__class__`` assignment, which CPython allows
between a heap class and a subclass that adds no slots (one layout). Nothing but the
builder ever sees the subclass.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _plain_fields(cls: type, who: str) -> tuple[dataclasses.Field, ...]:
    """``cls``'s fields, if it is a frozen slots dataclass of plain fields (no
    ``default_factory``, ``kw_only`` or ``InitVar``): what both rebuilds handle."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not (params.frozen and "__slots__" in cls.__dict__):
        raise TypeError(f"{cls.__name__}: {who} is for frozen slots dataclasses")
    fields = dataclasses.fields(cls)
    wanted = [name for name in inspect.signature(cls.__init__).parameters][1:]
    if wanted != [f.name for f in fields if f.init]:  # an InitVar is an argument, no field
        raise TypeError(f"{cls.__name__}: {who} takes no InitVar arguments")
    for f in fields:
        if f.default_factory is not dataclasses.MISSING or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: {who} takes plain fields only")
    return fields


def slot_init(cls: type[T]) -> type[T]:
    """Give ``cls`` (a frozen slots dataclass) an ``__init__`` that sets slots directly."""
    fields = _plain_fields(cls, "slot_init")
    env: dict[str, Any] = {}
    args: list[str] = []
    body: list[str] = []
    for f in fields:
        env[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            env[f"_default_{f.name}"] = f.default
        if not f.init:  # set to its default, as the dataclass's __init__ does
            body.append(f"    _set_{f.name}(self, _default_{f.name})")
            continue
        args.append(f.name if f.default is dataclasses.MISSING
                    else f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    src = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"])
    exec(src, env)  # noqa: S102 - code built from the class's own field names
    init = env["__init__"]
    original = cls.__init__  # type: ignore[misc]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(original.__annotations__)
    init.__doc__ = original.__doc__
    cls.__init__ = init  # type: ignore[misc]
    return cls


def slot_twin(cls: type[T]) -> type[T]:
    """The private subclass :func:`slot_builder` fills (module doc): no slots of its own,
    ``object``'s ``__setattr__`` and ``__delattr__`` (a plain store per field; with
    either inherited, every store would go through the frozen class's hook), and
    ``object``'s ``__init__``, so that a bare call ``twin()`` makes an empty instance
    (``type.__call__`` reaches ``object``'s allocation at once, where ``object.__new__
    (twin)`` goes through its wrapper, which copies its argument tuple: ~290
    instructions more per value). A value built in it must be re-classed ``obj.__class__
    = cls`` before anyone sees it."""
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: slot_twin is for slots classes")
    return type(f"{cls.__name__}Builder", (cls,), {
        "__slots__": (), "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__, "__init__": object.__init__,
        "__module__": cls.__module__})


_SELF = "slot_builder_obj_"  # the builder's local for the value
_RESERVED = {_SELF, "_twin", "_cls"}  # the builder's own names: no field's


def slot_builder(cls: type[T]) -> Callable[..., T]:
    """A function with ``cls``'s constructor parameters that builds what ``cls(...)``
    builds, at plain slot-store speed (module doc); ``cls`` is a frozen slots dataclass
    of plain fields (as for :func:`slot_init`)."""
    fields = _plain_fields(cls, "slot_builder")
    clash = [f.name for f in fields if f.name in _RESERVED or f.name.startswith("_default_")]
    if clash:
        raise TypeError(f"{cls.__name__}: slot_builder's own names as fields: {clash}")
    env: dict[str, Any] = {"_twin": slot_twin(cls), "_cls": cls}
    args: list[str] = []
    body = [f"    {_SELF} = _twin()"]
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"_default_{f.name}"] = f.default
        if not f.init:
            body.append(f"    {_SELF}.{f.name} = _default_{f.name}")
            continue
        args.append(f.name if f.default is dataclasses.MISSING
                    else f"{f.name}=_default_{f.name}")
        body.append(f"    {_SELF}.{f.name} = {f.name}")
    body.append(f"    {_SELF}.__class__ = _cls")
    if hasattr(cls, "__post_init__"):
        body.append(f"    {_SELF}.__post_init__()")
    body.append(f"    return {_SELF}")
    src = f"def build({', '.join(args)}):\n" + "\n".join(body)
    exec(src, env)  # noqa: S102 - code built from the class's own field names
    build = env["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    build.__module__ = cls.__module__
    build.__doc__ = f"``{cls.__name__}(...)``, built at slot speed (slot_builder)."
    return build
