"""Scenario files: a bundled name or a path -> a validated :class:`Scenario`.

    load_scenario("quick")                       bundled: scenarios/quick.yaml
    load_scenario("runs/my.yaml", ["seed=3"])    a file, with --set overrides
    load_scenario("scenario.resolved.json")      a resolved document: no pydantic needed
                                                 (unless overrides are given)

Errors name the file and line (or the ``--set`` item) and the key; relative paths inside
the file resolve against its folder, paths in overrides against the cwd.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hicache.presets import find_preset
from hicache.scenario.model import Scenario
from hicache.scenario.overrides import ScenarioError, apply_overrides
from hicache.scenario.resolved import is_resolved, load_resolved
from hicache.schema.errors import InputError
from hicache.schema.yamlio import read_yaml


def scenario_path(name_or_path: str | Path) -> Path:
    """The file a scenario argument names: a bundled scenario or a path."""
    try:
        return find_preset("scenarios", name_or_path)
    except InputError as e:
        raise ScenarioError(str(e)) from None


def load_scenario(name_or_path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override (``dotted.key=value`` items) and validate one scenario file."""
    path = scenario_path(name_or_path)
    source = str(name_or_path) if Path(name_or_path) == path else str(path)
    try:
        doc = read_yaml(path)
    except InputError as e:
        raise ScenarioError(str(e)) from None
    if not isinstance(doc.data, dict):
        raise ScenarioError(f"{source}: expected a mapping at the top level, got "
                            f"{type(doc.data).__name__}")
    items = list(overrides)
    if is_resolved(doc.data):  # validated where it was written: rebuilt as it is
        sc = load_resolved(path)
        return sc.with_overrides(items) if items else sc
    raw = apply_overrides(doc.data, items, source=source, base=Path.cwd(),
                          doc_base=path.resolve().parent)
    lines: dict[tuple, int | str] = dict(doc.lines)
    for item in items:
        key = tuple(item.partition("=")[0].strip().split("."))
        for p in [p for p in lines if p[: len(key)] == key]:
            del lines[p]
        lines[key] = f"--set {item}"
    return Scenario.from_mapping(raw, source=source, base=path.resolve().parent, lines=lines)
