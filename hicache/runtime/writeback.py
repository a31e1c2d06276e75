"""When D2H write-back runs: a runtime-side policy, pure and clock-free (time is passed in).

The scheduler says *what* to back up (BackupIntent); the runtime decides *when* (seed 000,
invariant 4: "whether D2H write-back should be throttled"). A runtime with a policy other
than ``none`` copies a batch's backups in chunks of ``chunk_bytes``, each at full speed,
and asks the policy before each chunk how long to wait::

    chunk ──> gap ──> chunk ──> gap ...     duty = chunk time / (chunk time + gap)

Pacing rather than a rate cap, because that is how a copy kernel or a DMA engine is
throttled in practice (each chunk runs at the link's speed), so compute is disturbed
while a chunk runs and not in the gaps.

    none      one all-layer copy right after the batch's compute (SGLang's behaviour)
    static    gaps that hold the average to ``rate_bytes_per_s``
    adaptive  learns how much chunks slow decode and picks the duty cycle that keeps
              decode steps within ``target_slowdown`` of their pace alone:
                excess(step) = seconds / baseline - 1, baseline = the latest decode step
                  of the same batch size with no chunk beside it, at most ``FRESH``
                  decode steps old (contexts grow a token a step: comparable); when there
                  is none, the next gap is stretched over one step to take one (a probe)
                k = sum(excess) / sum(overlap) over recent steps with chunks beside them
                  (overlap: the fraction of the step a chunk was copying; decayed sums)
                duty = clamp(target_slowdown / k, duty_min, 1)
              Chunks also yield to H2D loads in flight (loads feed the next batch's
              attention; backups can wait), unless the oldest backup has waited
              ``max_lag_s``: then chunks run back to back, loads or not.

Invariant: a policy never holds back a chunk for longer than ``max_lag_s`` past the age
at which its backup became ready (adaptive), so backup lag is bounded.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hicache.schema.plain import Plain
from hicache.schema.types import PosFloat, float_, int_

POLICIES = ("none", "static", "adaptive")


@dataclass(frozen=True)
class WritebackConfig(Plain):
    """``run.writeback``: the runtime's write-back policy by name, and its knobs."""

    policy: Literal[POLICIES] = "none"
    chunk_bytes: int_(ge=1) = 8 << 20  # bytes per paced chunk
    rate_bytes_per_s: PosFloat = 10.0e9  # static: average backup rate
    target_slowdown: float_(gt=0.0, le=10.0) = 0.02  # adaptive: decode steps may slow this much
    duty_min: float_(gt=0.0, le=1.0) = 0.05  # adaptive: lowest duty cycle
    max_lag_s: PosFloat = 0.5  # adaptive: a backup older than this runs unthrottled


@dataclass(frozen=True, slots=True)
class Gate:
    """Before the next chunk: wait ``wait_s``, then (``after_loads``) until the H2D loads
    in flight when the gate was asked have landed, but at most ``loads_s`` more."""

    wait_s: float = 0.0
    after_loads: bool = False
    loads_s: float = math.inf


class WritebackPolicy:
    """Base: no throttle. Subclasses override :meth:`gate` and the observations."""

    name = "none"

    def __init__(self, cfg: WritebackConfig) -> None:
        self.cfg = cfg
        self.chunks = 0
        self.stalled_s = 0.0  # total gap time asked for

    @property
    def chunked(self) -> bool:
        return False

    def gate(self, now: float, oldest_ready: float, loads_active: bool) -> Gate:
        """Before a chunk; ``oldest_ready``: when the oldest backup waiting became ready."""
        return Gate()

    def chunk_done(self, now: float, nbytes: int, seconds: float) -> None:
        self.chunks += 1
        self._last_chunk = seconds

    def observe_step(self, now: float, decode_batch: int, seconds: float, overlap: float
                     ) -> None:
        """A compute batch finished: ``decode_batch`` requests decoded (0: not a decode
        step); ``overlap``: the fraction of it during which a backup chunk was copying."""

    def describe(self) -> dict[str, float]:
        return {"chunks": self.chunks, "stalled_s": self.stalled_s}


class StaticThrottle(WritebackPolicy):
    name = "static"

    @property
    def chunked(self) -> bool:
        return True

    def __init__(self, cfg: WritebackConfig) -> None:
        super().__init__(cfg)
        self._debt = 0.0  # seconds of gap owed after the last chunk

    def gate(self, now: float, oldest_ready: float, loads_active: bool) -> Gate:
        wait, self._debt = self._debt, 0.0
        self.stalled_s += wait
        return Gate(wait)

    def chunk_done(self, now: float, nbytes: int, seconds: float) -> None:
        super().chunk_done(now, nbytes, seconds)
        self._debt = max(0.0, nbytes / self.cfg.rate_bytes_per_s - seconds)


class AdaptiveThrottle(WritebackPolicy):
    name = "adaptive"

    @property
    def chunked(self) -> bool:
        return True

    DECAY = 0.9  # weight of the past in the interference estimate, per step
    FRESH = 8  # decode steps a baseline stays comparable
    PROBE = 1.5  # a probe's gap, in decode steps

    def __init__(self, cfg: WritebackConfig) -> None:
        super().__init__(cfg)
        self.duty = 1.0
        self.steps = 0  # decode steps seen
        self.baseline: dict[int, tuple[int, float]] = {}  # batch -> (step, seconds), alone
        self._excess = self._overlap = 0.0  # decayed sums over steps beside chunks
        self._last_chunk = self._last_step = 0.0
        self._batch = 0  # the latest decode step's batch size
        self._probed = -self.FRESH  # step of the latest probe
        self.probes = 0

    @property
    def interference(self) -> float:
        """Estimated decode slowdown per unit of chunk overlap (k); 0 until seen."""
        return max(0.0, self._excess / self._overlap) if self._overlap > 0 else 0.0

    def _fresh(self, batch: int) -> float | None:
        seen = self.baseline.get(batch)
        return seen[1] if seen is not None and self.steps - seen[0] <= self.FRESH else None

    def gate(self, now: float, oldest_ready: float, loads_active: bool) -> Gate:
        if now - oldest_ready >= self.cfg.max_lag_s:
            return Gate()  # lag bound: back to back, loads or not
        gap = self._last_chunk * (1.0 - self.duty) / self.duty
        if (self._batch and self._fresh(self._batch) is None
                and self.steps - self._probed >= self.FRESH):
            gap = max(gap, self.PROBE * self._last_step)  # leave one step alone: a baseline
            self._probed = self.steps
            self.probes += 1
        left = max(0.0, oldest_ready + self.cfg.max_lag_s - now)  # until the lag bound
        gap = min(gap, left)
        self.stalled_s += gap
        return Gate(gap, after_loads=loads_active and gap < left, loads_s=left - gap)

    def observe_step(self, now: float, decode_batch: int, seconds: float, overlap: float
                     ) -> None:
        if decode_batch <= 0 or seconds <= 0:
            return
        self.steps += 1
        self._batch, self._last_step = decode_batch, seconds
        if overlap <= 0:
            self.baseline[decode_batch] = (self.steps, seconds)
            return
        base = self._fresh(decode_batch)
        if base is None:
            return  # nothing comparable
        self._excess = self.DECAY * self._excess + (seconds / base - 1.0)
        self._overlap = self.DECAY * self._overlap + min(1.0, overlap)
        k = self.interference
        self.duty = 1.0 if k <= self.cfg.target_slowdown else max(
            self.cfg.duty_min, self.cfg.target_slowdown / k)

    def describe(self) -> dict[str, float]:
        return {**super().describe(), "duty": self.duty, "interference": self.interference,
                "probes": self.probes}


class ChunkLog:
    """When chunks copied (the runtime's clock), to tell a step how much of it they
    overlapped. Invariant: at most one chunk copies at a time (one d2h stream)."""

    def __init__(self, keep: int = 64) -> None:
        self.active_since: float | None = None
        self.recent: deque[tuple[float, float]] = deque(maxlen=keep)

    def started(self, t: float) -> None:
        self.active_since = t

    def ended(self, start: float, end: float) -> None:
        self.active_since = None
        self.recent.append((start, end))

    def overlap(self, start: float, end: float) -> float:
        """The fraction of [start, end] during which a chunk was copying."""
        if end <= start:
            return 0.0
        busy = sum(max(0.0, min(e, end) - max(s, start)) for s, e in self.recent)
        if self.active_since is not None:
            busy += max(0.0, end - max(self.active_since, start))
        return min(1.0, busy / (end - start))


def make_policy(cfg: WritebackConfig | Mapping[str, Any] | str | None) -> WritebackPolicy:
    """The policy ``cfg`` names (a name alone takes the default knobs; a mapping holds
    WritebackConfig's keys)."""
    if cfg is None:
        cfg = WritebackConfig()
    elif isinstance(cfg, str):
        cfg = WritebackConfig(policy=cfg)  # type: ignore[arg-type]
    elif isinstance(cfg, Mapping):
        cfg = WritebackConfig(**cfg)
    cls = {"none": WritebackPolicy, "static": StaticThrottle,
           "adaptive": AdaptiveThrottle}.get(cfg.policy)
    if cls is None:
        raise ValueError(f"run.writeback.policy must be one of {POLICIES}, got {cfg.policy!r}")
    return cls(cfg)
