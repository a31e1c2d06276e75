"""The typed scenario: one frozen, validated object that every driver receives.

    Scenario.from_mapping(d, source=..., base=...)   validate once (base and variants)
    scenario.expand() -> [(variant name, Scenario)]  each variant, already validated
    scenario.with_overrides(["cache.page_size=32"])  a new Scenario, validated again
    scenario.to_mapping()                            plain data that validates back
    load_resolved(scenario.to_mapping())             the same Scenario, without pydantic

A Scenario is a frozen standard dataclass of plain sections (configs of :mod:`hicache`):
the input edge (:meth:`Scenario.from_mapping`) validates user data with pydantic, which
reads the field annotations; the fields' edge-only steps (load the model preset a name
picks, resolve paths against the scenario's folder, check that a trace exists) are
markers that only pydantic runs. Drivers receive the dataclass and never need pydantic
(:mod:`hicache.scenario.resolved` rebuilds one from plain data).

Invariant: a Scenario that exists is valid in every variant; its paths (model and
hardware files, traces) are absolute, resolved against the scenario file's folder; a
trace it names existed when it was validated.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

from hicache.config import DERIVED_KEYS, CacheConfig
from hicache.modelspec import DEFAULT_MODEL, ModelSpec, load_model_spec
from hicache.presets import find_preset, is_name, trace_hint
from hicache.routing import RouterConfig
from hicache.runtime.sharing import SharingConfig
from hicache.scenario.faults import Faults
from hicache.scenario.overrides import ScenarioError, apply_overrides, set_path
from hicache.scenario.sections import (
    DEFAULT_HARDWARE,
    RunSection,
    SchedulerSection,
    Variant,
)
from hicache.schema.adapters import json_schema as schema_of
from hicache.schema.constraints import After, Before, JsonSchema
from hicache.schema.plain import Plain, build, to_plain
from hicache.schema.types import NonEmptyStr, int_
from hicache.schema.yamlio import read_yaml
from hicache.workload.factory import WorkloadConfig
from hicache.workload.trace_replay import TraceConfig


def _base(info: Any) -> Path | None:
    return (info.context or {}).get("base")


def _model(v: Any, info: Any) -> Any:
    if isinstance(v, str | Path):
        return load_model_spec(v, base=_base(info))
    if v is None:
        raise ValueError(f"expected a preset name, a path or a mapping of model keys, "
                         f"got {v!r}")
    return v


def _hardware(v: Any, info: Any) -> Any:
    if isinstance(v, str | Path) and str(v):
        path = find_preset("hardware", v, base=_base(info))
        return str(v) if is_name(v) else str(path.resolve())
    if isinstance(v, Mapping):
        return dict(v)
    raise ValueError(f"expected a profile name, a path or a mapping, got {v!r}")


def _cache(v: Any) -> Any:
    for k in v if isinstance(v, Mapping) else ():
        if k in DERIVED_KEYS:
            raise ValueError(f"{k}: cannot be set: {DERIVED_KEYS[k]}")
    return v


def _workload(v: Any, info: Any) -> Any:
    """A trace path resolves against the scenario's folder (the cwd for a mapping)."""
    base = _base(info)
    if isinstance(v, Mapping) and v.get("kind") == "trace" and isinstance(v.get("path"), str):
        p = Path(v["path"]).expanduser()
        if v["path"] and not p.is_absolute():
            v = {**v, "path": str(((base or Path.cwd()) / p).resolve())}
    return v


def _trace_exists(v: Any) -> Any:
    if isinstance(v, TraceConfig) and not Path(v.path).is_file():
        raise ValueError(f"path: trace file not found: {v.path}{trace_hint(v.path)}")
    return v


def _unique(v: tuple[Variant, ...]) -> tuple[Variant, ...]:
    seen: set[str] = set()
    for i, var in enumerate(v):
        if var.name in seen:
            raise ValueError(f"[{i}].name: duplicate variant name {var.name!r}")
        seen.add(var.name)
    return v


def _default_model() -> ModelSpec:
    """The bundled default preset (checked by tests/scenario/test_presets.py), built
    without pydantic: a Scenario built directly or rebuilt from resolved data may omit it."""
    return build(ModelSpec, read_yaml(find_preset("models", DEFAULT_MODEL)).data)


def _inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its own ``$defs`` references replaced by the definitions (it is
    embedded in the Scenario's schema, where ``#/$defs/...`` would point elsewhere)."""
    defs = schema.pop("$defs", {})

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            ref = v.get("$ref", "")
            if ref.startswith("#/$defs/") and ref[8:] in defs:
                return walk({**defs[ref[8:]], **{k: x for k, x in v.items() if k != "$ref"}})
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(schema)


def _model_schema() -> dict[str, Any]:
    return {"anyOf": [
        {"type": "string", "description": "a preset name (scenarios/models) or a YAML path"},
        _inline_defs(schema_of(ModelSpec))], "default": DEFAULT_MODEL}


ModelField = Annotated[ModelSpec, Before(_model, with_info=True), JsonSchema(_model_schema)]
HardwareField = Annotated[str | dict[str, Any], Before(_hardware, with_info=True), JsonSchema(
    {"anyOf": [{"type": "string",
                "description": "a profile name (scenarios/hardware) or a YAML path"},
               {"type": "object", "description": "an inline hardware profile"}]})]
CacheField = Annotated[CacheConfig, Before(_cache)]
WorkloadField = Annotated[WorkloadConfig, Before(_workload, with_info=True),
                          After(_trace_exists)]
Variants = Annotated[tuple[Variant, ...], After(_unique)]


@dataclass(frozen=True, kw_only=True)
class Scenario(Plain):
    """One run's description (see module docstring); built by :meth:`from_mapping`,
    :func:`hicache.scenario.load_scenario` or :func:`hicache.scenario.load_resolved`."""

    # Built directly (Scenario(name=..., workload=AgentConfig())), every section must be
    # typed already: plain mappings are validated at the edge, by from_mapping.
    __pydantic_config__ = {"extra": "forbid", "validate_default": True}

    name: NonEmptyStr
    seed: int_(ge=0) = 0
    model: ModelField = field(default_factory=_default_model)
    hardware: HardwareField = DEFAULT_HARDWARE
    cache: CacheField = field(default_factory=CacheConfig)
    scheduler: SchedulerSection = SchedulerSection()  # frozen: one default is shared safely
    replicas: int_(ge=1, le=4096) = 1
    router: RouterConfig = RouterConfig()
    sharing: SharingConfig = SharingConfig()  # replicas on one runtime (hicache.runtime)
    workload: WorkloadField
    run: RunSection = RunSection()
    faults: Faults = ()  # injected in windows of simulated time (hicache.scenario.faults)
    variants: Variants = ()

    # where it was read from; not fields (equality ignores them)
    _source: ClassVar[str] = "<scenario>"
    _base: ClassVar[Path | None] = None
    _raw: ClassVar[Mapping[str, Any] | None] = None  # the data it was validated from
    _expanded: ClassVar[tuple[tuple[str, Scenario], ...]] = ()

    __hash__ = None  # type: ignore[assignment]  # sections hold dicts

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def from_mapping(cls, d: Any, *, source: str = "<scenario>", base: Path | None = None,
                     lines: Mapping[tuple, int | str] | None = None) -> Scenario:
        """Validate ``d`` and every variant of it (pydantic: the input edge); errors name
        ``source`` (line, key)."""
        if not isinstance(d, Mapping):
            raise ScenarioError(f"{source}: expected a mapping at the top level, got "
                                f"{type(d).__name__}")
        out = _validate(d, source, base, lines)
        expanded = []
        for i, v in enumerate(out.variants):
            body = {k: copy.deepcopy(val) for k, val in d.items() if k != "variants"}
            where = f"{source} [variant {v.name}]"
            here: dict[tuple, int | str] = {}  # a set key's errors point at its line
            for key, value in v.set.items():
                set_path(body, str(key), copy.deepcopy(value), f"{where}: set", base)
                at = (lines or {}).get(("variants", i, "set", key))
                if at is not None:
                    here[tuple(str(key).split("."))] = at
            expanded.append((v.name, _validate(body, where, base, here)))
        out._remember(expanded=tuple(expanded))
        return out

    def _remember(self, *, source: str | None = None, base: Path | None = None,
                  raw: Mapping[str, Any] | None = None,
                  expanded: tuple[tuple[str, Scenario], ...] | None = None) -> None:
        """Record where this scenario came from (set once, by its constructors)."""
        for key, value in (("_source", source), ("_base", base), ("_raw", raw),
                           ("_expanded", expanded)):
            if value is not None:
                object.__setattr__(self, key, value)

    # ---- use ---------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """Where the scenario came from (file, and variant), for messages."""
        return self._source

    @property
    def base_dir(self) -> Path | None:
        """The scenario file's folder (relative paths in it resolve there)."""
        return self._base

    def expand(self) -> list[tuple[str, Scenario]]:
        """``[(variant name, Scenario)]``; without variants ``[(name, self)]``."""
        if self.variants and not self._expanded:  # built directly: validate the variants
            self._remember(expanded=Scenario.from_mapping(
                self.to_mapping(), source=self.source, base=self._base)._expanded)
        return list(self._expanded) if self._expanded else [(self.name, self)]

    def variant(self, name: str) -> Scenario:
        for n, s in self.expand():
            if n == name:
                return s
        raise ScenarioError(f"{self.source}: unknown variant {name!r}; scenario has "
                            f"{[n for n, _ in self.expand()]}")

    def with_overrides(self, overrides: Iterable[str], *, flag: str = "--set") -> Scenario:
        """A new Scenario with each ``dotted.key=value`` set (values read as YAML),
        validated again; relative paths in values resolve against the cwd. ``flag`` names
        where the items came from in messages (``--set``, ``--grid``)."""
        items = list(overrides)
        raw = apply_overrides(self._raw if self._raw is not None else self.to_mapping(),
                              items, source=self.source, base=Path.cwd(), flag=flag,
                              doc_base=self._base)
        labels = {tuple(i.partition("=")[0].strip().split(".")): f"{flag} {i}" for i in items}
        return Scenario.from_mapping(raw, source=self.source, base=self._base, lines=labels)

    def to_mapping(self) -> dict[str, Any]:
        """Plain data (the resolved scenario) that :meth:`from_mapping` accepts back, and
        :func:`hicache.scenario.resolved.load_resolved` rebuilds without pydantic."""
        d = to_plain(self)
        d["model"] = self.model.to_mapping()
        for key in ("faults", "variants"):  # absent when empty (as written)
            if not d[key]:
                del d[key]
            else:
                d[key] = list(d[key])
        return d

    def scheduler_config(self, *, l3: bool) -> Any:
        """The :class:`SchedulerConfig` of this scenario (``l3``: an L3 is attached)."""
        return self.scheduler.config(l3=l3)


def _validate(d: Mapping[str, Any], source: str, base: Path | None,
              lines: Mapping[tuple, int | str] | None) -> Scenario:
    from hicache.scenario.validate import validate_scenario

    out = validate_scenario(Scenario, dict(d), source=source, base=base, lines=lines)
    out._remember(source=source, base=base, raw=copy.deepcopy(dict(d)))
    return out


def as_scenario(d: Scenario | Mapping[str, Any], *, source: str = "<scenario>") -> Scenario:
    """``d`` if it is a Scenario; a resolved document
    (:func:`hicache.scenario.resolved.resolved_document`) rebuilt without pydantic; else
    ``d`` validated (the input edge, needs pydantic; relative paths against the cwd)."""
    if isinstance(d, Scenario):
        return d
    from hicache.scenario.resolved import is_resolved, load_resolved

    if is_resolved(d):
        return load_resolved(d)
    return Scenario.from_mapping(d, source=source)


__all__ = ["Scenario", "as_scenario"]
