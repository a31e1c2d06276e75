"""Replay of a trace file (Mooncake or tokens format) at its recorded times.

Open loop: :meth:`TraceReplayWorkload.start` returns every request, sorted by arrival
(stable, so ties keep file order); arrival = recorded time * ``time_scale``
(0.5 replays twice as fast). ``max_requests`` keeps the first N lines.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from hicache.workload.open_loop import OpenLoopWorkload
from hicache.workload.params import float_param, optional_int_param
from hicache.workload.request import Request
from hicache.workload.traces import FORMATS, load_trace


@dataclass(frozen=True)
class TraceConfig:
    path: str = ""
    format: str = "auto"  # auto | mooncake | tokens
    time_scale: float = 1.0
    max_requests: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str | Path) or not str(self.path):
            raise ValueError(f"key 'path': expected a trace file path, got {self.path!r}")
        if self.format not in FORMATS:
            raise ValueError(f"key 'format': expected one of {list(FORMATS)}, "
                             f"got {self.format!r}")
        object.__setattr__(self, "time_scale", float_param("time_scale", self.time_scale))
        object.__setattr__(self, "max_requests",
                           optional_int_param("max_requests", self.max_requests, 1))


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
