"""Build a workload from a spec mapping (e.g. a scenario YAML section).

``spec["kind"]`` picks the workload; every other key must be a field of that kind's
config (a frozen plain dataclass; a mapping is validated with pydantic, so types, ranges
and finiteness are checked with the schema's messages). Unknown kinds, unknown keys and
invalid values raise ``ValueError`` naming the kind, the key and what is allowed. Unset
keys take the config's defaults (bench_multiturn's where they apply: request_length 512,
output_length 64, num_rounds 5, request_rate 1.0, max_parallel 128, num_clients 256).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Union

from hicache.schema.adapters import SchemaErrors, validate
from hicache.schema.constraints import ByKind
from hicache.schema.errors import format_errors
from hicache.workload.agent import AgentConfig, AgentWorkload
from hicache.workload.long_context import LongContextConfig, LongContextWorkload
from hicache.workload.multiturn import MultiturnConfig, MultiturnWorkload
from hicache.workload.request import Workload
from hicache.workload.shared_prefix import SharedPrefixConfig, SharedPrefixWorkload
from hicache.workload.trace_replay import TraceConfig, TraceReplayWorkload

_Builder = Callable[[Any, int, "Path | None"], Workload]

KINDS: dict[str, tuple[type, _Builder]] = {
    "multiturn": (MultiturnConfig, lambda c, s, _: MultiturnWorkload(c, s)),
    "long_context": (LongContextConfig, lambda c, s, _: LongContextWorkload(c, s)),
    "agent": (AgentConfig, lambda c, s, _: AgentWorkload(c, s)),
    "trace": (TraceConfig, lambda c, s, b: TraceReplayWorkload(c, s, b)),
    "shared_prefix": (SharedPrefixConfig, lambda c, s, _: SharedPrefixWorkload(c, s)),
}


# the scenario's ``workload`` section: one config per kind, picked by ``kind``
WorkloadConfig = Annotated[Union[tuple(cfg for cfg, _ in KINDS.values())],  # noqa: UP007
                           ByKind()]


def allowed_keys(kind: str) -> list[str]:
    return [f.name for f in dataclasses.fields(KINDS[kind][0])]


def make_config(spec: Mapping[str, Any] | Any) -> Any:
    """The validated config dataclass for ``spec`` (a mapping, validated with pydantic, or a
    config already)."""
    if any(isinstance(spec, cfg) for cfg, _ in KINDS.values()):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(f"workload spec must be a mapping, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"workload key 'kind': unknown kind {kind!r}; allowed: {list(KINDS)}")
    cls = KINDS[kind][0]
    try:
        return validate(cls, {str(k): v for k, v in spec.items()})
    except SchemaErrors as e:
        line = format_errors(e, source="", root=cls)[0].removeprefix(": ")
        key, _, problem = line.partition(": ")
        raise ValueError(f"workload kind {kind!r}: key {key!r}: {problem}") from None


def make_workload(spec: Mapping[str, Any] | Any, seed: int,
                  base_dir: Path | None = None) -> Workload:
    """A fresh workload for ``spec`` (a mapping or a config); ``base_dir`` resolves
    relative trace paths."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    config = make_config(spec)
    return KINDS[config.kind][1](config, seed, base_dir)
