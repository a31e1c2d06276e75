"""Dotted overrides (``--set cache.page_size=32``, a variant's ``set:``) on plain data.

Values are read as YAML by the strict reader (``32`` -> int, ``1e6`` -> float, ``null``,
``[1, 2]``); missing sections are created. A section (``cache``, ``scheduler``, ...) set to
null or to a scalar is an error, not a silent wipe; a mapping given for a section updates
the keys it names. Nothing here mutates its input. Validation happens after, on the whole
scenario (:meth:`hicache.scenario.Scenario.from_mapping`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hicache.presets import is_name
from hicache.schema.errors import InputError, suggest
from hicache.schema.yamlio import read_yaml_text

TOP_LEVEL_KEYS = ("name", "seed", "model", "hardware", "cache", "scheduler", "replicas",
                  "router", "sharing", "workload", "variants", "run", "faults")
SECTIONS = ("cache", "scheduler", "run", "workload", "sharing")
PATH_KEYS = ("model", "hardware", "workload.path")  # relative paths resolve against a base


class ScenarioError(InputError):
    """A scenario that cannot be used; the message starts with the file (and line)."""


def set_path(d: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    """Set ``dotted`` in ``d`` (in place), creating missing sections."""
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
                    flag: str = "--set") -> dict[str, Any]:
    """A copy of ``d`` with each ``"dotted.key=value"`` set (see module docstring);
    relative paths in ``model``, ``hardware`` and ``workload.path`` values resolve against
    ``base`` when given. Errors name ``source`` and the item (``flag`` labels it)."""
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
        set_path(out, key, value, where)
    return out
