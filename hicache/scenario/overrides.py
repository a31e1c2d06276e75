"""Dotted overrides (``--set cache.page_size=32``, a variant's ``set:``) on plain data.

Values are read as YAML by the strict reader (``32`` -> int, ``1e6`` -> float, ``null``,
``[1, 2]``); missing sections are created. A section (``cache``, ``scheduler``, ...) set to
null or to a scalar is an error, not a silent wipe; a mapping given for a section updates
the keys it names. Nothing here mutates its input. Validation happens after, on the whole
scenario (:meth:`hicache.scenario.Scenario.from_mapping`).

A key whose value may be a name standing for a mapping (:data:`NAMED`: ``hardware`` and
``model`` name a bundled preset or a YAML file, ``router`` a policy) can be set into:
``hardware.l3.mooncake.nic_bytes_per_s=7e8`` on ``hardware: h100-sxm`` first replaces the
name by the mapping it names, read as the loader would (a bundled name, or a path relative
to the scenario's folder), then sets the key in it. Items apply in order:
``hardware=h200-sxm`` then ``hardware.x.y=1`` changes h200-sxm; ``hardware.x.y=1`` then
``hardware=h200-sxm`` replaces the whole profile (the name wins, as any later item does).
Which keys a profile has is its loader's to check (the simulator's, for hardware).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hicache.presets import is_name, read_preset
from hicache.schema.errors import InputError, suggest
from hicache.schema.yamlio import read_yaml_text

TOP_LEVEL_KEYS = ("name", "seed", "model", "hardware", "cache", "scheduler", "replicas",
                  "router", "sharing", "workload", "variants", "run", "faults")
SECTIONS = ("cache", "scheduler", "run", "workload", "sharing")
PATH_KEYS = ("model", "hardware", "workload.path")  # relative paths resolve against a base
# top-level keys whose value may be a name for a mapping: the preset folder it names (a
# preset or a YAML path), or None for a router policy name (``{policy: NAME}``)
NAMED: dict[str, str | None] = {"hardware": "hardware", "model": "models", "router": None}


class ScenarioError(InputError):
    """A scenario that cannot be used; the message starts with the file (and line)."""


def named_mapping(key: str, ref: str | Path, source: str, base: Path | None = None
                  ) -> dict[str, Any]:
    """The mapping that the name (or path) ``ref`` of top-level ``key`` (one of
    :data:`NAMED`) stands for, as the loader reads it: a bundled preset, or a file whose
    relative path resolves against ``base`` (the folder of the file that named it)."""
    kind = NAMED[key]
    if kind is None:
        return {"policy": str(ref)}
    try:
        return read_preset(kind, ref, base=base)[0]
    except InputError as e:  # it names the kind and the name, or the file
        raise ScenarioError(f"{source}: {e}") from None


def set_path(d: dict[str, Any], dotted: str, value: Any, source: str,
             base: Path | None = None) -> None:
    """Set ``dotted`` in ``d`` (in place), creating missing sections; a name in a
    :data:`NAMED` key that ``dotted`` goes into becomes its mapping first (relative paths
    against ``base``, the folder relative paths in ``d`` resolve against)."""
    parts = dotted.split(".")
    if not dotted or any(not p for p in parts):
        raise ScenarioError(f"{source}: bad key path {dotted!r}")
    if parts[0] not in TOP_LEVEL_KEYS:
        raise ScenarioError(f"{source}: {parts[0]}: {suggest(parts[0], TOP_LEVEL_KEYS)} "
                            f"(in {dotted!r})")
    node = d
    for i, p in enumerate(parts[:-1]):
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        elif i == 0 and p in NAMED and isinstance(child, str | Path) and str(child):
            child = node[p] = named_mapping(p, child, f"{source}: cannot set {dotted!r}", base)
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ScenarioError(f"{source}: cannot set {dotted!r}: {where!r} is not a mapping")
        node = child
    last = parts[-1]
    if len(parts) == 1 and last in SECTIONS:
        if not isinstance(value, Mapping):
            raise ScenarioError(f"{source}: {last}: is a section; set its keys "
                                f"({last}.KEY=VALUE), not the section to {value!r}")
        if isinstance(node.get(last), dict):
            node[last] = {**node[last], **value}
            return
    node[last] = value


def _absolute(key: str, value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value or (key != "workload.path" and is_name(value)):
        return value
    p = Path(value).expanduser()
    return value if p.is_absolute() else str((base / p).resolve())


def apply_overrides(d: Mapping[str, Any], overrides: Iterable[str], *,
                    source: str = "<overrides>", base: Path | None = None,
                    flag: str = "--set", doc_base: Path | None = None) -> dict[str, Any]:
    """A copy of ``d`` with each ``"dotted.key=value"`` set (see module docstring);
    relative paths in ``model``, ``hardware`` and ``workload.path`` values resolve against
    ``base`` when given, those already in ``d`` (a profile a dotted key goes into) against
    ``doc_base`` (the scenario file's folder). Errors name ``source`` and the item (``flag``
    labels it)."""
    out = copy.deepcopy(dict(d))
    for item in overrides:
        where = f"{source} ({flag} {item})"
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise ScenarioError(f"{where}: not of the form key=value")
        try:
            value = read_yaml_text(raw, where).data
        except InputError as e:
            raise ScenarioError(str(e)) from None
        if base is not None and key in PATH_KEYS:
            value = _absolute(key, value, base)
        set_path(out, key, value, where, doc_base)
    return out
