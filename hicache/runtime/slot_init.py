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
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")


def slot_init(cls: type[T]) -> type[T]:
    """Give ``cls`` (a frozen slots dataclass) an ``__init__`` that sets slots directly."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not (params.frozen and "__slots__" in cls.__dict__):
        raise TypeError(f"{cls.__name__}: slot_init is for frozen slots dataclasses")
    env: dict[str, Any] = {}
    args: list[str] = []
    body: list[str] = []
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    wanted = [name for name in inspect.signature(cls.__init__).parameters][1:]
    if wanted != [f.name for f in fields if f.init]:  # an InitVar is an argument, no field
        raise TypeError(f"{cls.__name__}: slot_init takes no InitVar arguments")
    for f in fields:
        if f.default_factory is not dataclasses.MISSING or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: slot_init takes plain fields only")
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
