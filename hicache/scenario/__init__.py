"""Scenarios: one typed, validated :class:`Scenario` per run, from a YAML file or data.

Public API (what drivers, the CLI and notebooks use)::

    load_scenario(name_or_path, overrides=()) -> Scenario   bundled name or YAML path
    Scenario.from_mapping(d, source=, base=)  -> Scenario   from plain data
    scenario.expand()        -> [(variant name, Scenario)]  every variant, validated
    scenario.variant(name)   -> Scenario
    scenario.with_overrides(["key.path=value", ...]) -> Scenario
    scenario.to_mapping()    -> dict (validates back)
    as_scenario(scenario_or_mapping) -> Scenario             what drivers call on entry
    load_resolved(path_or_mapping)   -> Scenario   resolved data back, without pydantic
    write_resolved(scenario, path)                 scenario.resolved.json for another machine
    apply_overrides(d, items) -> dict                        the same dotted sets on data
                        (hardware.KEY / model.KEY / router.KEY go into the named profile)
    json_schema() / json_schema_text()                       for editors (docs/...json)
    ScenarioError (a ValueError): every message starts with the file (and line) and key

Fields: ``name``, ``seed``, ``model`` (:class:`hicache.modelspec.ModelSpec`), ``hardware``
(profile name, absolute path or mapping; the simulator loads it), ``cache``
(:class:`hicache.config.CacheConfig`), ``scheduler`` (:class:`SchedulerSection`),
``replicas``, ``router`` (:class:`hicache.routing.RouterConfig`), ``workload`` (one config
per kind, :mod:`hicache.workload.factory`), ``run`` (:class:`RunSection`), ``variants``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hicache.lazy import lazy_exports

# name -> the module defining it: imported on first use (PEP 562), so importing a
# submodule (``hicache.scenario.command``, which every ``hicache-lab --help`` builds)
# does not load the model, its sections, the scheduler and the workloads
_EXPORTS = {
    "DEFAULT_MODEL": "hicache.modelspec",
    "load_scenario": "hicache.scenario.load", "scenario_path": "hicache.scenario.load",
    "Scenario": "hicache.scenario.model", "as_scenario": "hicache.scenario.model",
    "TOP_LEVEL_KEYS": "hicache.scenario.overrides",
    "ScenarioError": "hicache.scenario.overrides",
    "apply_overrides": "hicache.scenario.overrides",
    "load_resolved": "hicache.scenario.resolved",
    "write_resolved": "hicache.scenario.resolved",
    "DEFAULT_HARDWARE": "hicache.scenario.sections", "RUN_KEYS": "hicache.scenario.sections",
    "SCHEDULER_KEYS": "hicache.scenario.sections", "RunSection": "hicache.scenario.sections",
    "SchedulerSection": "hicache.scenario.sections", "Variant": "hicache.scenario.sections",
    "json_schema": "hicache.scenario.validate",
    "json_schema_text": "hicache.scenario.validate",
}

if TYPE_CHECKING:
    from hicache.modelspec import DEFAULT_MODEL
    from hicache.scenario.load import load_scenario, scenario_path
    from hicache.scenario.model import Scenario, as_scenario
    from hicache.scenario.overrides import TOP_LEVEL_KEYS, ScenarioError, apply_overrides
    from hicache.scenario.resolved import load_resolved, write_resolved
    from hicache.scenario.sections import (
        DEFAULT_HARDWARE,
        RUN_KEYS,
        SCHEDULER_KEYS,
        RunSection,
        SchedulerSection,
        Variant,
    )
    from hicache.scenario.validate import json_schema, json_schema_text

__all__ = [
    "DEFAULT_HARDWARE", "DEFAULT_MODEL", "RUN_KEYS", "SCHEDULER_KEYS", "TOP_LEVEL_KEYS",
    "RunSection", "Scenario", "ScenarioError", "SchedulerSection", "Variant",
    "apply_overrides", "as_scenario", "json_schema", "json_schema_text", "load_resolved",
    "load_scenario", "scenario_path", "write_resolved",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
