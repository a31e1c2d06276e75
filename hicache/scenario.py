"""Scenario files: one YAML document describing a run, as a plain nested dict.

Top-level keys (only these): name, seed, model, hardware, cache, scheduler, replicas, router,
workload, variants, run. ``name`` is required. ``cache`` is validated by
:meth:`hicache.config.CacheConfig.from_mapping`; ``variants`` is a list of
``{name: str, set: {dotted.key: value}}`` applied over the base by :func:`expand_variants`.

Invariants: every error names the file (and, for YAML syntax, the line) and the offending
key; loading never mutates shared state and the functions here never mutate their input.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from hicache.config import CacheConfig, ConfigError

TOP_LEVEL_KEYS = (
    "name",
    "seed",
    "model",
    "hardware",
    "cache",
    "scheduler",
    "replicas",
    "router",
    "workload",
    "variants",
    "run",
)
VARIANT_KEYS = ("name", "set")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message starts with the file (and line)."""


def _set_path(d: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    parts = dotted.split(".")
    if not dotted or any(not p for p in parts):
        raise ScenarioError(f"{source}: bad key path {dotted!r}")
    if parts[0] not in TOP_LEVEL_KEYS:
        raise ScenarioError(
            f"{source}: unknown top-level key {parts[0]!r} in {dotted!r}; "
            f"allowed: {', '.join(TOP_LEVEL_KEYS)}"
        )
    node = d
    for i, p in enumerate(parts[:-1]):
        child = node.setdefault(p, {})
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ScenarioError(f"{source}: cannot set {dotted!r}: {where!r} is not a mapping")
        node = child
    node[parts[-1]] = value


def apply_overrides(
    d: Mapping[str, Any], overrides: Iterable[str], *, source: str = "<overrides>"
) -> dict[str, Any]:
    """A copy of ``d`` with each ``"dotted.key=value"`` set; values parsed by yaml.safe_load
    (``32`` -> int, ``null`` -> None, ``[1, 2]`` -> list, ``abc`` -> str)."""
    out = copy.deepcopy(dict(d))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ScenarioError(f"{source}: override {item!r} is not of the form key=value")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ScenarioError(f"{source}: override {item!r}: bad value ({e})") from None
        _set_path(out, key.strip(), value, source)
    return out


def expand_variants(d: Mapping[str, Any], *, source: str = "<scenario>") -> list[tuple[str, dict]]:
    """``[(variant name, full scenario without 'variants')]``, each variant's ``set`` applied
    over a copy of the base; a scenario without variants gives ``[(name, scenario)]``."""
    base = copy.deepcopy(dict(d))
    variants = base.pop("variants", None) or []
    if not isinstance(variants, list):
        raise ScenarioError(f"{source}: variants: expected a list, got {type(variants).__name__}")
    if not variants:
        return [(str(base.get("name", "")), base)]
    out: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for i, v in enumerate(variants):
        where = f"{source}: variants[{i}]"
        if not isinstance(v, dict):
            raise ScenarioError(f"{where}: expected a mapping with keys name, set")
        extra = sorted(set(v) - set(VARIANT_KEYS))
        if extra:
            raise ScenarioError(f"{where}: unknown key {extra[0]!r}; allowed: name, set")
        name = v.get("name")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{where}: name: expected a non-empty string, got {name!r}")
        if name in seen:
            raise ScenarioError(f"{where}: name: duplicate variant name {name!r}")
        seen.add(name)
        sets = v.get("set") or {}
        if not isinstance(sets, dict):
            raise ScenarioError(f"{where} ({name}): set: expected a mapping of dotted keys")
        body = copy.deepcopy(base)
        for key, value in sets.items():
            _set_path(body, str(key), copy.deepcopy(value), f"{where} ({name}): set")
        out.append((name, body))
    return out


def validate(d: Any, *, source: str) -> dict[str, Any]:
    """Check top-level keys, ``name``, and the ``cache`` section of the base and of every
    variant; return ``d``. Errors name ``source`` and the key."""
    if not isinstance(d, dict):
        raise ScenarioError(f"{source}: expected a mapping at the top level, got {d!r}")
    for k in d:
        if k not in TOP_LEVEL_KEYS:
            raise ScenarioError(
                f"{source}: unknown top-level key {k!r}; allowed: {', '.join(TOP_LEVEL_KEYS)}"
            )
    if not isinstance(d.get("name"), str) or not d["name"]:
        raise ScenarioError(f"{source}: name: required, a non-empty string")
    has_variants = bool(d.get("variants"))
    for vname, body in expand_variants(d, source=source):
        where = f"{source} [variant {vname}]" if has_variants else source
        try:
            CacheConfig.from_mapping(body.get("cache"), source=f"{where}: cache")
        except ConfigError as e:
            raise ScenarioError(str(e)) from None
    return d


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Read, apply ``overrides`` and validate one scenario file; return the plain dict."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(f"{source}: cannot read ({e.strerror})") from None
    try:
        d = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ScenarioError(f"{source}:{line}: YAML syntax error: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{source}: YAML error: {e}") from None
    if isinstance(d, dict):
        d = apply_overrides(d, overrides, source=f"{source} (override)")
    return validate(d, source=source)


def cache_config(d: Mapping[str, Any], *, source: str = "<scenario>") -> CacheConfig:
    """The validated :class:`CacheConfig` of one (expanded) scenario dict."""
    return CacheConfig.from_mapping(d.get("cache"), source=f"{source}: cache")


def check_keys(section: Mapping[str, Any], allowed: Iterable[str], where: str,
               source: str) -> None:
    """Raise naming ``source`` and ``where.key`` for a key of ``section`` not in ``allowed``."""
    allowed = set(allowed)
    for k in section:
        if k not in allowed:
            raise ValueError(f"{source}: {where}.{k}: unknown key; allowed: "
                             f"{', '.join(sorted(allowed))}")
