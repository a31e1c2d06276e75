"""Build a workload from a spec mapping (e.g. a scenario YAML section).

``spec["kind"]`` picks the workload; every other key must be a field of that kind's
config dataclass. Unknown kinds, unknown keys and invalid values raise ``ValueError``
naming the kind, the key and what is allowed. Unset keys take the config's defaults
(bench_multiturn's where they apply: request_length 512, output_length 64, num_rounds 5,
request_rate 1.0, max_parallel 128, num_clients 256).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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


def allowed_keys(kind: str) -> list[str]:
    return [f.name for f in dataclasses.fields(KINDS[kind][0])]


def make_config(spec: Mapping[str, Any]) -> Any:
    """The validated config dataclass for ``spec``."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"workload spec must be a mapping, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"workload key 'kind': unknown kind {kind!r}; allowed: {list(KINDS)}")
    params = {k: v for k, v in spec.items() if k != "kind"}
    allowed = allowed_keys(kind)
    for key in params:
        if key not in allowed:
            raise ValueError(f"workload kind {kind!r}: unknown key {key!r}; "
                             f"allowed keys: {allowed}")
    try:
        return KINDS[kind][0](**params)
    except ValueError as e:
        raise ValueError(f"workload kind {kind!r}: {e}") from e


def make_workload(spec: Mapping[str, Any], seed: int,
                  base_dir: Path | None = None) -> Workload:
    """A fresh workload for ``spec``; ``base_dir`` resolves relative trace paths."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    config = make_config(spec)
    return KINDS[spec["kind"]][1](config, seed, base_dir)
