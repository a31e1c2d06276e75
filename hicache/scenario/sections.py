"""The scenario's small sections: scheduler, run options, variants; the shared defaults.

Each is a frozen plain dataclass (:class:`hicache.schema.plain.Plain`: checked on
construction, unknown keys refused where pydantic validates); the cache section is
:class:`hicache.config.CacheConfig`, the router :class:`hicache.routing.RouterConfig`, the
workload one of :data:`hicache.workload.factory.WorkloadConfig`, the model
:class:`hicache.modelspec.ModelSpec`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from hicache.runtime.writeback import WritebackConfig
from hicache.scheduler.scheduler import SchedulerConfig
from hicache.schema.plain import Plain, field_types
from hicache.schema.types import Bool, NonEmptyStr, PosFloat, PosInt, Str, float_
from hicache.tiers.l3_guard import RetryPolicy

DEFAULT_HARDWARE = "h100-sxm"
_D = SchedulerConfig()


@dataclass(frozen=True)
class SchedulerSection(Plain):
    """``scheduler:`` keys (the rest of :class:`SchedulerConfig` is derived)."""

    max_running_requests: PosInt = _D.max_running_requests
    chunked_prefill_size: PosInt = _D.chunked_prefill_size  # prompt tokens per prefill batch
    overlap: Bool = _D.overlap  # plan batch N+1 while N executes
    requery_lost_prefix: Bool = _D.requery_lost_prefix  # re-ask L3 if L1/L2 lost the prefix
    # share of L2 that arrival-time L3 prefetches may hold (SGLang: 0.8 x (L2 - L1) / L2),
    # and what one over it does: wait for room / the queue head (ours), skip it (SGLang)
    prefetch_share: float_(gt=0.0, le=1.0) = _D.prefetch_share
    prefetch_over_share: Literal["wait", "skip"] = _D.prefetch_over_share
    track_components: Bool = _D.track_components  # SWA / MAMBA pools too (L1, simulator)

    def config(self, *, l3: bool) -> SchedulerConfig:
        return SchedulerConfig(**dataclasses.asdict(self), l3=l3)


@dataclass(frozen=True)
class RunSection(Plain):
    """``run:`` options of a run (both runtimes read the same keys)."""

    layerwise: Bool = True  # load KV layer by layer, overlapping compute
    trace_layers: Bool = False  # one timeline row per layer
    backup_throttle_bytes_per_s: PosFloat | None = None  # cap on L1 -> L2 backup bandwidth
    max_sim_time: PosFloat | None = None  # stop after this many (simulated or wall) seconds
    progress: Bool = False
    swa_tokens: PosInt | None = None  # SWA pool (scheduler.track_components); default L1's
    mamba_slots: PosInt | None = None  # MAMBA slots; default 3 x max_running_requests
    torch_profiler: Str | None = None  # torch runtime only: a Chrome trace path
    # the runtime in its own process (ipc.ProcessGPURuntime): the torch driver runs it so,
    # the simulator charges the profile's cpu.ipc_* crossing costs
    runtime_process: Bool = False
    # when the runtime runs D2H backups (none, static, adaptive): both runtimes
    writeback: WritebackConfig = WritebackConfig()
    fault_twin: Bool = True  # with faults: also simulate a fault-free twin to cost them
    fold_decode: Bool = True  # simulator: steady decode steps as one event (sim.fold)
    # simulator: a layer-wise batch's load chain, and its last layers once all landed,
    # as one event each (sim.chain_fold, sim.tail_fold)
    fold_layers: Bool = True
    timeline_steps: Bool = False  # simulator: one timeline row per folded decode step
    # how L3 calls are guarded (deadline, retries, cooldown): both runtimes
    l3_retry: RetryPolicy = RetryPolicy()


RUN_KEYS = frozenset(field_types(RunSection))
SCHEDULER_KEYS = frozenset(field_types(SchedulerSection))


@dataclass(frozen=True)
class Variant(Plain):
    """One entry of ``variants:``: a name and dotted keys set over the base."""

    name: NonEmptyStr
    set: dict[str, Any] = field(default_factory=dict, hash=False)
