"""The scenario's input edge: plain data -> a validated :class:`Scenario`; the JSON Schema.

    validate_scenario(Scenario, data, source=, base=, lines=)   ScenarioError on bad input
    json_schema() / json_schema_text()                          docs/scenario.schema.json

pydantic reads the Scenario dataclass's annotations (and the markers in them); it is
imported on the first call, not with this module (:mod:`hicache.schema.adapters`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hicache.scenario.faults import FAULT_KINDS
from hicache.scenario.overrides import ScenarioError
from hicache.schema.adapters import SchemaErrors, validate
from hicache.schema.adapters import json_schema as schema_of
from hicache.schema.errors import format_errors
from hicache.workload.factory import KINDS as WORKLOAD_KINDS


def _drop_workload_tag(loc: tuple) -> tuple:
    """pydantic puts the workload (or a fault's) kind in error locations; the file has no
    such key."""
    if len(loc) > 1 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        return (loc[0], *loc[2:])
    if len(loc) > 2 and loc[0] == "faults" and loc[2] in FAULT_KINDS:
        return (*loc[:2], *loc[3:])
    return loc


def validate_scenario(cls: type, d: Mapping[str, Any], *, source: str, base: Path | None,
                      lines: Mapping[tuple, int | str] | None) -> Any:
    """``d`` validated as ``cls`` (the Scenario); relative paths resolve against ``base``."""
    try:
        return validate(cls, dict(d), context={"base": base})
    except SchemaErrors as e:
        msgs = format_errors(e, source=source, root=cls, lines=lines,
                             clean_loc=_drop_workload_tag)
        raise ScenarioError("\n".join(msgs)) from None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for editors (``docs/scenario.schema.json``)."""
    from hicache.scenario.model import Scenario

    schema = schema_of(Scenario)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hicache-lab scenario"
    return schema


def json_schema_text() -> str:
    """:func:`json_schema` as the text of ``docs/scenario.schema.json``."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
