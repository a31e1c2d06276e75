"""Resolved scenarios: validated where they were written, rebuilt anywhere without pydantic.

    write_resolved(scenario, "scenario.resolved.json")   here: validated, paths absolute
    load_resolved("scenario.resolved.json") -> Scenario  there: no pydantic, no presets
    load_resolved(scenario.to_mapping())    -> Scenario  the same, from a mapping
    python -m hicache.scenario resolve SCENARIO OUT.json [--set KEY=VALUE ...]

``load_scenario`` (so every command's SCENARIO argument) also reads a resolved document.

The document (JSON)::

    {"format": "hicache-lab/resolved-scenario", "version": 1, "source": "quick.yaml",
     "scenario": <Scenario.to_mapping()>,
     "variants": {"L1": <to_mapping() of that variant>, ...}}     (when it has variants)

:func:`load_resolved` is the trusted constructor (:func:`hicache.schema.plain.build`): it
rebuilds the typed sections from plain data and each section checks its fields on
construction (types, ranges, cross-field rules), but nothing is coerced, looked up or
resolved: the model is inline, paths are absolute, variants are expanded. A bare
``to_mapping()`` with variants loads too; its variants are expanded on first use, which
validates (needs pydantic). Infinite rates are written as ``Infinity`` (Python's json reads
it back). A trace file must exist on the machine that runs it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hicache.scenario.model import Scenario
from hicache.scenario.overrides import ScenarioError
from hicache.schema.errors import InputError
from hicache.schema.plain import build
from hicache.schema.yamlio import read_text

FORMAT = "hicache-lab/resolved-scenario"
VERSION = 1


def is_resolved(data: Any) -> bool:
    """Whether ``data`` is a resolved document (its ``format`` key says so)."""
    return isinstance(data, Mapping) and data.get("format") == FORMAT


def resolved_document(scenario: Scenario) -> dict[str, Any]:
    """The JSON-able document :func:`load_resolved` reads (see module docstring)."""
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "source": scenario.source,
                           "scenario": scenario.to_mapping()}
    if scenario.variants:
        doc["variants"] = {name: v.to_mapping() for name, v in scenario.expand()}
    return doc


def write_resolved(scenario: Scenario, path: str | Path) -> Path:
    """Write :func:`resolved_document` of ``scenario`` as JSON to ``path``."""
    path = Path(path)
    path.write_text(json.dumps(resolved_document(scenario), indent=1) + "\n",
                    encoding="utf-8")
    return path


def _read(path: Path) -> Any:
    try:
        text = read_text(path)
    except InputError as e:
        raise ScenarioError(str(e)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{path}:{e.lineno}:{e.colno}: not JSON ({e.msg}); a resolved "
                            f"scenario is written by write_resolved") from None


def _build(data: Any, source: str) -> Scenario:
    try:
        sc = build(Scenario, data)
    except ValueError as e:
        raise ScenarioError(f"{source}: not a resolved scenario: {e}") from None
    sc._remember(source=source, raw=copy.deepcopy(dict(data)))
    return sc


def load_resolved(src: str | Path | Mapping[str, Any]) -> Scenario:
    """The Scenario of a resolved document (a JSON file or its mapping) or of a bare
    ``Scenario.to_mapping()``; needs neither pydantic nor the preset files."""
    from_file = not isinstance(src, Mapping)
    data, source = (_read(Path(src)), str(src)) if from_file else (src, "<resolved scenario>")
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: expected a mapping at the top level, got "
                            f"{type(data).__name__}")
    if "format" not in data:  # a bare to_mapping()
        return _build(data, source)
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ScenarioError(f"{source}: format {data.get('format')!r} version "
                            f"{data.get('version')!r}; expected {FORMAT!r} version {VERSION}")
    if not from_file:
        source = str(data.get("source") or source)
    sc = _build(data.get("scenario"), source)
    variants = data.get("variants") or {}
    names = [v.name for v in sc.variants]
    given = list(variants) if isinstance(variants, Mapping) else variants
    if given != names:
        raise ScenarioError(f"{source}: variants: expected one resolved mapping for each of "
                            f"{names}, got {given!r}")
    if names:
        sc._remember(expanded=tuple((name, _build(m, f"{source} [variant {name}]"))
                                    for name, m in variants.items()))
    return sc

