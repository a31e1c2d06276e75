"""The typed scenario: one frozen, validated object that every driver receives.

    Scenario.from_mapping(d, source=..., base=...)   validate once (base and variants)
    scenario.expand() -> [(variant name, Scenario)]  each variant, already validated
    scenario.with_overrides(["cache.page_size=32"])  a new Scenario, validated again
    scenario.to_mapping()                            plain data that validates back

Invariant: a Scenario that exists is valid in every variant; its paths (model and
hardware files, traces) are absolute, resolved against the scenario file's folder; a
trace it names exists.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from hicache.config import DERIVED_KEYS, CacheConfig
from hicache.modelspec import DEFAULT_MODEL, ModelSpec, load_model_spec
from hicache.presets import find_preset, is_name, trace_hint
from hicache.routing import ROUTERS, RouterConfig
from hicache.scenario.overrides import ScenarioError, apply_overrides, set_path
from hicache.scenario.sections import (
    DEFAULT_HARDWARE,
    RunSection,
    SchedulerSection,
    Variant,
)
from hicache.schema.errors import format_errors
from hicache.schema.types import NonEmptyStr, int_
from hicache.workload.factory import KINDS as WORKLOAD_KINDS
from hicache.workload.factory import WorkloadConfig
from hicache.workload.trace_replay import TraceConfig


def _base(info: ValidationInfo) -> Path | None:
    return (info.context or {}).get("base")


def _model(v: Any, info: ValidationInfo) -> Any:
    if isinstance(v, str | Path):
        return load_model_spec(v, base=_base(info))
    if v is None:
        raise ValueError(f"expected a preset name, a path or a mapping of model keys, "
                         f"got {v!r}")
    return v


def _hardware(v: Any, info: ValidationInfo) -> Any:
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


def _workload(v: Any, info: ValidationInfo) -> Any:
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


ModelField = Annotated[ModelSpec, BeforeValidator(_model), WithJsonSchema({"anyOf": [
    {"type": "string", "description": "a preset name (scenarios/models) or a YAML path"},
    TypeAdapter(ModelSpec).json_schema()]})]
HardwareField = Annotated[str | dict[str, Any], BeforeValidator(_hardware), WithJsonSchema(
    {"anyOf": [{"type": "string",
                "description": "a profile name (scenarios/hardware) or a YAML path"},
               {"type": "object", "description": "an inline hardware profile"}]})]


class Scenario(BaseModel):
    """One run's description (see module docstring); built by :meth:`from_mapping` or
    :func:`hicache.scenario.load_scenario`."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    name: NonEmptyStr
    seed: int_(ge=0) = 0
    model: ModelField = DEFAULT_MODEL
    hardware: HardwareField = DEFAULT_HARDWARE
    cache: Annotated[CacheConfig, BeforeValidator(_cache)] = Field(default_factory=CacheConfig)
    scheduler: SchedulerSection = SchedulerSection()
    replicas: int_(ge=1, le=4096) = 1
    router: Annotated[RouterConfig, WithJsonSchema({"anyOf": [
        {"enum": list(ROUTERS)}, RouterConfig.model_json_schema()]})] = RouterConfig()
    workload: Annotated[WorkloadConfig, BeforeValidator(_workload)]
    run: RunSection = RunSection()
    variants: tuple[Variant, ...] = ()

    _source: str = PrivateAttr(default="<scenario>")
    _base: Path | None = PrivateAttr(default=None)
    _raw: dict = PrivateAttr(default_factory=dict)
    _expanded: tuple = PrivateAttr(default=())

    @field_validator("workload", mode="after")
    @classmethod
    def _check_trace(cls, v: Any) -> Any:
        return _trace_exists(v)

    @field_validator("variants", mode="after")
    @classmethod
    def _unique(cls, v: tuple[Variant, ...]) -> tuple[Variant, ...]:
        seen: set[str] = set()
        for i, var in enumerate(v):
            if var.name in seen:
                raise ValueError(f"[{i}].name: duplicate variant name {var.name!r}")
            seen.add(var.name)
        return v

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def from_mapping(cls, d: Any, *, source: str = "<scenario>", base: Path | None = None,
                     lines: Mapping[tuple, int | str] | None = None) -> Scenario:
        """Validate ``d`` and every variant of it; errors name ``source`` (line, key)."""
        if not isinstance(d, Mapping):
            raise ScenarioError(f"{source}: expected a mapping at the top level, got "
                                f"{type(d).__name__}")
        out = cls._validate(d, source, base, lines)
        expanded = []
        for i, v in enumerate(out.variants):
            body = {k: copy.deepcopy(val) for k, val in d.items() if k != "variants"}
            where = f"{source} [variant {v.name}]"
            here: dict[tuple, int | str] = {}  # a set key's errors point at its line
            for key, value in v.set.items():
                set_path(body, str(key), copy.deepcopy(value), f"{where}: set")
                at = (lines or {}).get(("variants", i, "set", key))
                if at is not None:
                    here[tuple(str(key).split("."))] = at
            expanded.append((v.name, cls._validate(body, where, base, here)))
        out._expanded = tuple(expanded)
        return out

    @classmethod
    def _validate(cls, d: Mapping[str, Any], source: str, base: Path | None,
                  lines: Mapping[tuple, int | str] | None) -> Scenario:
        try:
            out = cls.model_validate(dict(d), context={"base": base})
        except ValidationError as e:
            msgs = format_errors(e, source=source, root=cls, lines=lines,
                                 clean_loc=_drop_workload_tag)
            raise ScenarioError("\n".join(msgs)) from None
        out._source, out._base, out._raw = source, base, copy.deepcopy(dict(d))
        return out

    def __eq__(self, other: object) -> bool:  # the fields; not where it was read from
        return type(other) is type(self) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # sections hold dicts

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
        if self.variants and not self._expanded:  # built with Scenario(...), not from_mapping
            self._expanded = Scenario.from_mapping(self.to_mapping(), source=self.source,
                                                   base=self._base)._expanded
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
        raw = apply_overrides(self._raw, items, source=self.source, base=Path.cwd(),
                              flag=flag)
        labels = {tuple(i.partition("=")[0].strip().split(".")): f"{flag} {i}" for i in items}
        return Scenario.from_mapping(raw, source=self.source, base=self._base, lines=labels)

    def to_mapping(self) -> dict[str, Any]:
        """Plain data (the resolved scenario) that :meth:`from_mapping` accepts back."""
        d = self.model_dump(mode="python")
        d["model"] = self.model.to_mapping()
        d["variants"] = [{"name": v.name, "set": dict(v.set)} for v in self.variants]
        if not d["variants"]:
            del d["variants"]
        return d

    def scheduler_config(self, *, l3: bool) -> Any:
        """The :class:`SchedulerConfig` of this scenario (``l3``: an L3 is attached)."""
        return self.scheduler.config(l3=l3)


def as_scenario(d: Scenario | Mapping[str, Any], *, source: str = "<scenario>") -> Scenario:
    """``d`` if it is a Scenario, else ``d`` validated (relative paths against the cwd)."""
    return d if isinstance(d, Scenario) else Scenario.from_mapping(d, source=source)


def _drop_workload_tag(loc: tuple) -> tuple:
    """pydantic puts the workload kind in error locations; the file has no such key."""
    if len(loc) > 1 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        return (loc[0], *loc[2:])
    return loc


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for editors (``docs/scenario.schema.json``)."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hicache-lab scenario"
    return schema


def json_schema_text() -> str:
    """:func:`json_schema` as the text of ``docs/scenario.schema.json``."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


__all__ = ["Scenario", "as_scenario", "json_schema", "json_schema_text"]
