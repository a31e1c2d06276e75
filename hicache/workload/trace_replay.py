"""Replay of a trace file (Mooncake or tokens format) at its recorded times.

Open loop: :meth:`TraceReplayWorkload.start` returns every request, sorted by arrival
(stable, so ties keep file order); arrival = recorded time * ``time_scale``
(0.5 replays twice as fast). ``max_requests`` keeps the first N lines.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hicache.schema.plain import Plain
from hicache.schema.types import NonEmptyStr, NonNegFloat, PosInt
from hicache.workload.open_loop import OpenLoopWorkload
from hicache.workload.params import WORKLOAD_CONFIG
from hicache.workload.request import Request
from hicache.workload.traces import FORMATS, load_trace


@dataclass(frozen=True)
class TraceConfig(Plain):
    """``path`` is resolved against the scenario file's folder when the scenario loads."""

    __pydantic_config__ = WORKLOAD_CONFIG

    kind: Literal["trace"] = "trace"
    path: NonEmptyStr = ""
    format: Literal[FORMATS] = "auto"  # auto | mooncake | tokens
    time_scale: NonNegFloat = 1.0
    max_requests: PosInt | None = None


class TraceReplayWorkload(OpenLoopWorkload):
    """Loads the trace on construction (format errors surface early); ``seed`` is unused."""

    def __init__(self, config: TraceConfig, seed: int = 0, base_dir: Path | None = None) -> None:
        super().__init__(config, seed)
        path = Path(config.path)
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        self.path = path
        reqs = load_trace(path, config.format, config.max_requests)
        if config.time_scale != 1.0:
            reqs = [dataclasses.replace(r, arrival=r.arrival * config.time_scale) for r in reqs]
        self._loaded = sorted(reqs, key=lambda r: r.arrival)

    def _requests(self) -> list[Request]:
        return list(self._loaded)
