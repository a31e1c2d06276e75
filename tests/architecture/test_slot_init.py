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

from hicache.kvcache import decisions, manager, plans, prefetch
from hicache.runtime import handles, interface
from hicache.runtime.slot_init import slot_builder, slot_init, slot_twin
from hicache.scheduler import scheduler
from hicache.tree import actions, radix, residency
from sim import batch


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


@dataclass(frozen=True, slots=True)
class _Listy:  # a default_factory field
    items: list = field(default_factory=list)


@dataclass(slots=True)
class _Mutable:  # not frozen
    x: int


@dataclass(frozen=True, slots=True)
class _Seeded:  # an InitVar
    x: int
    seed: dataclasses.InitVar[int] = 0

    def __post_init__(self, seed: int) -> None:
        pass


def test_slot_init_refuses_what_it_does_not_rebuild() -> None:
    for cls in (_Listy, _Mutable, _Seeded):
        with pytest.raises(TypeError):
            slot_init(cls)


def test_the_classes_that_use_it_build_with_every_field_set() -> None:
    """Each class's ``__init__`` is slot_init's, and building one from distinct values per
    field reads every value back (a setter bound to the wrong field would not)."""
    classes = [c for m in (interface, handles, actions, decisions, radix, manager, scheduler)
               for c in vars(m).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c)
               and any(n.startswith("_set_")  # a C __init__ (a slot_twin's): none
                       for n in getattr(getattr(c.__init__, "__code__", None), "co_names",
                                        ()))]
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


_BuiltRun = _make("_BuiltRun")
_build_run = slot_builder(_BuiltRun)


def test_a_builder_gives_the_constructor_values() -> None:
    """slot_builder's function: the constructor's parameters, defaults, keywords and
    ``__post_init__`` checks, and a value of the class itself (not its twin) that is
    equal, hashes alike, repr's alike, stays frozen, pickles and replaces."""
    for args, kw in (((3,), {}), ((3, 4), {}), ((3,), {"name": "y"}),
                     ((), {"first": 5, "count": 2, "name": "z"})):
        a, b = _build_run(*args, **kw), _BuiltRun(*args, **kw)
        assert type(a) is _BuiltRun
        assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        assert a._seen is None  # init=False: its default
        assert pickle.loads(pickle.dumps(a)) == b
        assert dataclasses.replace(a, count=9) == dataclasses.replace(b, count=9)
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.first = 1  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del a.first  # type: ignore[misc]
    with pytest.raises(ValueError, match="bad count 0"):  # __post_init__ runs
        _build_run(1, 0)
    with pytest.raises(TypeError):
        _build_run()
    with pytest.raises(TypeError):
        _build_run(1, _seen=2)
    assert list(inspect.signature(_build_run).parameters) == \
        list(inspect.signature(_BuiltRun.__init__).parameters)[1:]


def test_slot_builder_refuses_what_it_does_not_rebuild() -> None:
    @dataclass(frozen=True)
    class Dicty:
        x: int

    @dataclass(frozen=True, slots=True)
    class Clashing:
        _cls: int  # the builder's own name for the class

    for cls in (_Listy, _Mutable, _Seeded, Dicty, Clashing):
        with pytest.raises(TypeError):
            slot_builder(cls)
    with pytest.raises(TypeError):
        slot_twin(Dicty)


def _builders() -> list[tuple[str, object, type]]:
    """Every module-level slot_builder function of the modules that use it, with its
    class (its ``__name__`` is ``build_<class>``)."""
    out = []
    for m in (interface, manager, plans, prefetch, radix, residency, scheduler, batch):
        for name, f in vars(m).items():
            if callable(f) and getattr(f, "__name__", "").startswith("build_"):
                cls = next(c for mod in (interface, handles, actions, decisions, radix,
                                         manager, scheduler)
                           if isinstance(c := vars(mod).get(f.__name__[6:]), type))
                out.append((f"{m.__name__}.{name}", f, cls))
    return out


def test_the_builders_in_use_set_every_field() -> None:
    """Each builder in use fills every field of its class from distinct values and
    returns the class's own value, equal to the constructor's."""
    found = _builders()
    assert {cls.__name__ for _, _, cls in found} >= {
        "BatchPlan", "StepResult", "LoadIntent", "Evict", "Reuse", "Prefetch",
        "PrefetchIntent", "MatchResult", "InsertResult", "FreeDevice", "Demoted",
        "FreeHost", "Deleted", "Admit", "Load", "Finish", "Backup", "BackupIntent",
        "Release", "StoreIntent", "PrefetchStop", "BackupNode", "RequestSlice",
        "PreparedBatchHandle", "BatchCompletion", "CacheExtentRef", "PreparedSlice"}
    for where, build, cls in found:
        flds = [f for f in dataclasses.fields(cls) if f.init]
        values = {f.name: object() for f in flds}
        if hasattr(cls, "__post_init__"):
            continue  # its checks read the values
        obj = build(**values)  # type: ignore[operator]
        assert type(obj) is cls, where
        for name, v in values.items():
            assert getattr(obj, name) is v, (where, name)
        assert obj == cls(**values), where
