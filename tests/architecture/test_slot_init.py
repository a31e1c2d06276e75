"""slot_init gives a frozen slots dataclass an ``__init__`` that sets slots directly: the
values, defaults, keywords, ``__post_init__`` checks, equality, hashing, pickling and
``dataclasses.replace`` of the dataclass's own ``__init__`` (a twin class without it is
the reference), for every class that uses it."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from hicache.kvcache import decisions, manager
from hicache.runtime import handles, interface
from hicache.runtime.slot_init import slot_init
from hicache.scheduler import scheduler
from hicache.tree import actions, radix


def _make(name: str) -> type:
    @dataclass(frozen=True, slots=True)
    class Run:
        tag: ClassVar[str] = "run"
        first: int
        count: int = 1
        name: str = "x"
        _seen: int | None = field(default=None, init=False, compare=False)

        def __post_init__(self) -> None:
            if self.count <= 0:
                raise ValueError(f"bad count {self.count}")
    Run.__name__ = Run.__qualname__ = name  # module-level names: instances pickle
    return Run


_FastRun = slot_init(_make("_FastRun"))
_RefRun = _make("_RefRun")


def test_an_init_that_sets_slots_gives_the_dataclass_init_values() -> None:
    fast, ref = _FastRun, _RefRun
    assert fast.__init__ is not ref.__init__
    for args, kw in (((3,), {}), ((3, 4), {}), ((3,), {"name": "y"}),
                     ((), {"first": 5, "count": 2, "name": "z"})):
        a, b = fast(*args, **kw), ref(*args, **kw)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]
        assert a._seen is None and hash(a) == hash(fast(*args, **kw))
        assert pickle.loads(pickle.dumps(a)) == a
        assert dataclasses.replace(a, count=9).count == 9
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.first = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="bad count 0"):  # __post_init__ still runs
        fast(1, 0)
    with pytest.raises(TypeError):
        fast()  # a field without a default is required
    with pytest.raises(TypeError):
        fast(1, _seen=2)  # init=False: not a parameter
    assert inspect.signature(fast.__init__).parameters.keys() == \
        inspect.signature(ref.__init__).parameters.keys()


def test_slot_init_refuses_what_it_does_not_rebuild() -> None:
    @dataclass(frozen=True, slots=True)
    class Listy:
        items: list = field(default_factory=list)

    @dataclass(slots=True)
    class Mutable:
        x: int

    @dataclass(frozen=True, slots=True)
    class Seeded:
        x: int
        seed: dataclasses.InitVar[int] = 0

        def __post_init__(self, seed: int) -> None:
            pass

    for cls in (Listy, Mutable, Seeded):
        with pytest.raises(TypeError):
            slot_init(cls)


def test_the_classes_that_use_it_build_with_every_field_set() -> None:
    """Each class's ``__init__`` is slot_init's, and building one from distinct values per
    field reads every value back (a setter bound to the wrong field would not)."""
    classes = [c for m in (interface, handles, actions, decisions, radix, manager, scheduler)
               for c in vars(m).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c)
               and any(n.startswith("_set_") for n in c.__init__.__code__.co_names)]
    names = {c.__name__ for c in classes}
    assert {"BatchPlan", "RequestSlice", "BatchCompletion", "PageRun", "CacheExtentRef",
            "FreeDevice", "Evict", "Admit", "MatchResult", "Reuse", "PreparedBatchHandle",
            "StepResult"} <= names
    for cls in classes:
        flds = [f for f in dataclasses.fields(cls) if f.init]
        values = {f.name: object() for f in flds}
        obj = object.__new__(cls)
        if hasattr(cls, "__post_init__"):
            continue  # its checks read the values (PageRun: tested above, and by its users)
        cls.__init__(obj, **values)
        for name, v in values.items():
            assert getattr(obj, name) is v, (cls.__name__, name)
