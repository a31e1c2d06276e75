"""Hardware profile: GPU, PCIe, copy kernels, host, CPU and L3 figures (frozen).

Invariant: a loaded profile is complete and validated; every field is a plain number in
SI units (bytes, seconds, FLOP/s). The YAML schema is documented in docs/SCHEMAS.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.hardware.loader import Section, resolve

Table = tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    bf16_flops: float
    matmul_efficiency: float
    hbm_bytes_per_s: float
    kernel_launch_s: float
    memory_bytes: float | None = None  # HBM capacity (sizes L1 from --mem-fraction-static)


@dataclass(frozen=True, slots=True)
class PcieSpec:
    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    bidirectional_bytes_per_s: float
    call_overhead_s: float
    half_efficiency_bytes: float
    copy_engines: int

    def lone_copy_time(self, nbytes: float, direction: str = "h2d") -> float:
        """One cudaMemcpyAsync of ``nbytes`` alone on the link:
        call_overhead + B / rate(B), rate(B) = peak * B / (B + half_efficiency_bytes)."""
        peak = self.h2d_bytes_per_s if direction == "h2d" else self.d2h_bytes_per_s
        return self.call_overhead_s + (nbytes + self.half_efficiency_bytes) / peak


IO_MECHANISMS = ("sm_zero_copy", "gather_dma")


@dataclass(frozen=True, slots=True)
class IoKernelSpec:
    """The ``kernel`` io backend. ``mechanism``: ``sm_zero_copy`` is SGLang's copy kernel
    (SMs read pinned host memory directly: one launch per op, at ``bytes_per_s``, slowing
    compute); ``gather_dma`` is what the torch runtime can build (a device gather/scatter
    into a staging buffer plus one DMA per host run). A study names the one it models."""

    bytes_per_s: float
    compute_slowdown: float
    mechanism: str = "sm_zero_copy"


@dataclass(frozen=True, slots=True)
class InterpreterSpec:
    """The CPU runtime's interpreter lock (:mod:`sim.interpreter`): speeds in (0, 1] of
    interpreter work while two threads need the lock, measured by
    :mod:`gpu_backend.calib_gil`. ``driver_<k>`` / ``lane_<k>``: the driver thread doing
    k-work (``python``: pure interpreter; ``torch``: small torch calls) and a busy lane
    beside it; ``lanes``: two lanes' worker threads beside each other."""

    driver_python: float
    lane_python: float
    driver_torch: float
    lane_torch: float
    lanes: float
    wake_s: float = 0.0  # a lane's worker thread waking up (after a wait, or the driver)


@dataclass(frozen=True, slots=True)
class HostSpec:
    """The driver thread's work per op (all 0 in datasheet profiles: not modelled).
    ``op_submit_s``: queue one op on a lane; ``op_gap_s``: a lane's idle time between two
    queued ops; ``layer_launch_s``: issue one layer's kernels; ``copy_issue_s``: issue one
    copy call (cudaMemcpyAsync); ``admit_step_s``: the scheduler's extra time in a step
    that admits requests (a prefill batch), beyond ``scheduler_step_s``;
    ``insert_step_s``: its extra time after a prefill batch completed (the prompts enter
    the tree); ``finish_step_s``: per request that finished (released, and in a measured
    run the workload's follow-up generated); ``wakeup_s``: the driver thread waking up
    after the completion it waited for, before its step; ``interpreter``: the lock the
    CPU runtime's threads share (None: not modelled)."""

    op_submit_s: float = 0.0
    op_gap_s: float = 0.0
    layer_launch_s: float = 0.0
    copy_issue_s: float = 0.0
    admit_step_s: float = 0.0
    insert_step_s: float = 0.0
    finish_step_s: float = 0.0
    wakeup_s: float = 0.0
    interpreter: InterpreterSpec | None = None


@dataclass(frozen=True, slots=True)
class InterconnectSpec:
    """GPU-to-GPU fabric of a tensor-parallel group (NVLink/NVSwitch): the bus bandwidth
    of one all-reduce (NCCL busBw) and its fixed latency."""

    allreduce_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class MooncakeSpec:
    """A Mooncake store (docs/SOURCES.md §5). ``master_rpc_s``: one existence query (a
    round trip to the master); ``latency_s``: a transfer's fixed cost (placement lookup,
    transfer submission); ``nic_bytes_per_s``: each replica's own NIC, which its reads and
    writes share; ``nodes`` storage nodes each serve ``node_bytes_per_s`` (all replicas
    share them) and hold ``capacity_bytes / nodes``."""

    master_rpc_s: float
    latency_s: float
    capacity_bytes: float
    nic_bytes_per_s: float
    node_bytes_per_s: float
    nodes: int = 1

    @property
    def store_bytes_per_s(self) -> float:
        return self.node_bytes_per_s * self.nodes


@dataclass(frozen=True, slots=True)
class FileSpec:
    read_bytes_per_s: float
    write_bytes_per_s: float
    latency_s: float
    capacity_bytes: float
    shared: bool = False


@dataclass(frozen=True, slots=True)
class CalibratedSpec:
    """Measured tables (written by gpu_backend calibration); empty tables mean absent."""

    device: str
    copy_calls_per_row: int = 1  # copy calls behind one table row (e.g. 2 x layers)
    copy_h2d: Table = ()
    copy_d2h: Table = ()
    prefill_layer: Table = ()
    decode_layer: Table = ()
    # the model shape the tables were measured with, as sorted (key, value) pairs of a
    # model-preset mapping (lists become tuples); () when the profile does not say
    shape: tuple[tuple[str, Any], ...] = ()
    # measured grids the cost model fits (sim.cost): {"attention", "prefill", "decode",
    # "embed", "sample"} and {"setup", "prepare"}; None when absent
    compute: Any = None
    host: Any = None
    # how the serving loop's ops differ from the hot microbenchmarks (gpu_backend.
    # calib_insitu): compute_scale, first_op_s, sample_scale, setup_s; None when absent
    in_situ: Any = None

    def shape_mapping(self) -> dict[str, Any]:
        """``calibrated.shape`` as a dict ({} when absent)."""
        return dict(self.shape)


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    name: str
    gpu: GpuSpec
    pcie: PcieSpec
    io_kernel: IoKernelSpec
    host_memory_bytes_per_s: float
    scheduler_step_s: float
    mooncake: MooncakeSpec | None
    file: FileSpec | None
    calibrated: CalibratedSpec | None = None
    source: str = "<mapping>"
    host_cpu: HostSpec = HostSpec()
    ablate: frozenset[str] = frozenset()  # modelled effects switched off (ablation studies)
    interconnect: InterconnectSpec | None = None  # TP all-reduce fabric (multi-GPU nodes)
    # the RuntimeInterface across a process (run.runtime_process): seconds one crossing
    # adds with O(1) content (execute, poll), and a prepare_batch crossing by the plan's
    # requests ([[requests, seconds], ...]); absent = not measured for this host
    ipc_crossing_s: float | None = None
    ipc_prepare_s: Table = ()


def _gpu(s: Section) -> GpuSpec:
    eff = s.num("matmul_efficiency", positive=True)
    if eff > 1:
        raise ValueError(f"{s.origin}: key 'gpu.matmul_efficiency' must be <= 1")
    return GpuSpec(
        s.num("bf16_flops", positive=True), eff,
        s.num("hbm_bytes_per_s", positive=True), s.num("kernel_launch_s"),
        s.num("memory_bytes", positive=True) if s.has("memory_bytes") else None,
    )


def _pcie(s: Section) -> PcieSpec:
    return PcieSpec(
        s.num("h2d_bytes_per_s", positive=True), s.num("d2h_bytes_per_s", positive=True),
        s.num("bidirectional_bytes_per_s", positive=True), s.num("call_overhead_s"),
        s.num("half_efficiency_bytes"), s.int("copy_engines", positive=True),
    )


def _calibrated(s: Section) -> CalibratedSpec:
    copy = s.sub("copy", {})
    return CalibratedSpec(
        device=s.str("device", "cuda"),
        copy_calls_per_row=int(copy.num("calls_per_row", 1, positive=True)),
        copy_h2d=copy.table("h2d") if copy.has("h2d") else (),
        copy_d2h=copy.table("d2h") if copy.has("d2h") else (),
        prefill_layer=s.table("prefill_layer") if s.has("prefill_layer") else (),
        decode_layer=s.table("decode_layer") if s.has("decode_layer") else (),
        shape=_shape(s.sub("shape")) if s.has("shape") else (),
        compute=_compute(s.sub("compute")) if s.has("compute") else None,
        host=_host_grids(s.sub("host")) if s.has("host") else None,
        in_situ=_in_situ(s.sub("in_situ")) if s.has("in_situ") else None,
    )


def _in_situ(s: Section) -> dict[str, float]:
    return {"compute_scale": s.num("compute_scale", 1.0, positive=True),
            "first_op_s": s.num("first_op_s", 0.0),
            "sample_scale": s.num("sample_scale", 1.0, positive=True),
            "setup_s": s.num("setup_s", 0.0)}


def _rows(s: Section, key: str, width: int) -> tuple[tuple[float, ...], ...]:
    """A list of rows of ``width`` non-negative numbers, the last (seconds) positive."""
    raw = s.raw(key)
    where = f"{s.origin}: key {s._key(key)!r}"
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where} must be a non-empty list of [{width} numbers] rows")
    out = []
    for i, row in enumerate(raw):
        ok = isinstance(row, list) and len(row) == width and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            and x >= 0 for x in row)
        if not ok or row[-1] <= 0:
            raise ValueError(f"{where} row {i}: expected {width} finite numbers >= 0 with "
                             f"a positive last one (seconds), got {row!r}")
        out.append(tuple(float(x) for x in row))
    return tuple(out)


def _compute(s: Section) -> dict[str, Any]:
    mech = s.str("attention", "padded")
    if mech not in ("padded", "ragged"):
        raise ValueError(f"{s.origin}: key {s._key('attention')!r} must be padded or ragged")
    out: dict[str, Any] = {"attention": mech, "prefill": _rows(s, "prefill", 4),
                           "decode": _rows(s, "decode", 4)}
    for key in ("embed", "sample"):
        if s.has(key):
            out[key] = _rows(s, key, 2)
    return out


def _host_grids(s: Section) -> dict[str, Any]:
    return {"setup": _rows(s, "setup", 4), "prepare": _rows(s, "prepare", 3)}


ABLATIONS = ("context", "knee", "lm_head", "embed", "in_situ", "host_lane", "op_gap",
             "copy_calls", "pipelined_issue", "scheduler_step", "gather_dma", "interpreter",
             "wakeup", "page_order")


def _ablate(top: Section) -> frozenset[str]:
    raw = top.raw("ablate", [])
    if not isinstance(raw, list) or any(x not in ABLATIONS for x in raw):
        raise ValueError(f"{top.origin}: key 'ablate' must be a list of effects from "
                         f"{', '.join(ABLATIONS)}, got {raw!r}")
    return frozenset(raw)


SPEEDS = ("driver_python", "lane_python", "driver_torch", "lane_torch", "lanes")


def _host_spec(cpu: Section) -> HostSpec:
    # profiles calibrated before the interpreter lock was modelled said how lanes waited
    # for the driver with these two keys; sim.interpreter replaces that rule
    for legacy in ("device_waits_for_host", "handoff_s"):
        cpu.raw(legacy, None)
    interp = None
    if cpu.has("interpreter"):
        i = cpu.sub("interpreter")
        speeds = [i.num(f, positive=True) for f in SPEEDS]
        if any(x > 1 for x in speeds):
            raise ValueError(f"{cpu.origin}: key 'cpu.interpreter' speeds must be in (0, 1], "
                             f"got {dict(zip(SPEEDS, speeds, strict=True))}")
        interp = InterpreterSpec(*speeds, i.num("wake_s", 0.0))
    return HostSpec(**{k: cpu.num(k, 0.0) for k in (
        "op_submit_s", "op_gap_s", "layer_launch_s", "copy_issue_s", "admit_step_s",
        "insert_step_s", "finish_step_s", "wakeup_s")}, interpreter=interp)


def _interconnect(s: Section) -> InterconnectSpec:
    return InterconnectSpec(s.num("allreduce_bytes_per_s", positive=True), s.num("latency_s"))


def _shape(s: Section) -> tuple[tuple[str, Any], ...]:
    """``calibrated.shape``: a mapping with a string ``name``; other values are numbers,
    strings or lists of those (a model preset's keys)."""
    s.str("name")
    out = []
    for key in sorted(s.data):
        v = s.data[key]
        if isinstance(v, list):
            if not all(isinstance(x, int | float | str) for x in v):
                raise ValueError(f"{s.origin}: key {s._key(key)!r} must be a list of scalars")
            v = tuple(v)
        elif not isinstance(v, int | float | str):
            raise ValueError(f"{s.origin}: key {s._key(key)!r} must be a number or a string")
        out.append((str(key), v))
    return tuple(out)


def _mooncake(m: Section) -> MooncakeSpec:
    if m.has("bytes_per_s"):
        raise ValueError(f"{m.origin}: key 'l3.mooncake.bytes_per_s' is gone: one global rate "
                         f"mixed two ratios (docs/SOURCES.md §5); give nic_bytes_per_s (each "
                         f"replica's NIC), node_bytes_per_s and nodes (the store's service)")
    return MooncakeSpec(
        m.num("master_rpc_s"), m.num("latency_s"), m.num("capacity_bytes", positive=True),
        m.num("nic_bytes_per_s", positive=True), m.num("node_bytes_per_s", positive=True),
        m.int("nodes", 1, positive=True))


def load_profile(source: str | Path | Mapping[str, Any]) -> HardwareProfile:
    """Load a profile from a name (``scenarios/hardware/NAME.yaml``), a path or a mapping."""
    data, origin = resolve(source, "hardware")
    top = Section(data, origin)
    io = top.sub("io_kernel")
    slowdown = io.num("compute_slowdown")
    if slowdown >= 1:
        raise ValueError(f"{origin}: key 'io_kernel.compute_slowdown' must be < 1")
    mechanism = io.str("mechanism", "sm_zero_copy")
    if mechanism not in IO_MECHANISMS:
        raise ValueError(f"{origin}: key 'io_kernel.mechanism' must be one of "
                         f"{', '.join(IO_MECHANISMS)}, got {mechanism!r}")
    l3 = top.sub("l3", {})
    mooncake = file = None
    if l3.has("mooncake"):
        mooncake = _mooncake(l3.sub("mooncake"))
    if l3.has("file"):
        f = l3.sub("file")
        shared = f.raw("shared", False)
        if not isinstance(shared, bool):
            raise ValueError(f"{origin}: key 'l3.file.shared' must be true or false")
        file = FileSpec(
            f.num("read_bytes_per_s", positive=True), f.num("write_bytes_per_s", positive=True),
            f.num("latency_s"), f.num("capacity_bytes", positive=True), shared,
        )
    cpu = top.sub("cpu")
    profile = HardwareProfile(
        name=top.str("name"),
        gpu=_gpu(top.sub("gpu")),
        pcie=_pcie(top.sub("pcie")),
        io_kernel=IoKernelSpec(io.num("bytes_per_s", positive=True), slowdown, mechanism),
        host_memory_bytes_per_s=top.sub("host").num("memory_bytes_per_s", positive=True),
        scheduler_step_s=cpu.num("scheduler_step_s"),
        ipc_crossing_s=cpu.num("ipc_crossing_s") if cpu.has("ipc_crossing_s") else None,
        ipc_prepare_s=cpu.table("ipc_prepare_s") if cpu.has("ipc_prepare_s") else (),
        mooncake=mooncake,
        file=file,
        calibrated=_calibrated(top.sub("calibrated")) if top.has("calibrated") else None,
        source=origin,
        host_cpu=_host_spec(cpu),
        ablate=_ablate(top),
        interconnect=_interconnect(top.sub("interconnect")) if top.has("interconnect")
        else None,
    )
    # every hand-written key was asked for: a typo is an error, not a silent default
    # (calibration writes more measured tables than the cost model reads yet)
    top.finish(skip=("calibrated",))
    return profile
