"""Hardware profile: GPU, PCIe, copy kernels, host, CPU and L3 figures (frozen).

Invariant: a loaded profile is complete and validated; every field is a plain number in
SI units (bytes, seconds, FLOP/s). The YAML schema is documented in docs/SCHEMAS.md.
"""

from __future__ import annotations

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


@dataclass(frozen=True, slots=True)
class IoKernelSpec:
    bytes_per_s: float
    compute_slowdown: float


@dataclass(frozen=True, slots=True)
class MooncakeSpec:
    master_rpc_s: float
    bytes_per_s: float
    latency_s: float
    capacity_bytes: float


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
    )


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


def load_profile(source: str | Path | Mapping[str, Any]) -> HardwareProfile:
    """Load a profile from a name (``scenarios/hardware/NAME.yaml``), a path or a mapping."""
    data, origin = resolve(source, "hardware")
    top = Section(data, origin)
    io = top.sub("io_kernel")
    slowdown = io.num("compute_slowdown")
    if slowdown >= 1:
        raise ValueError(f"{origin}: key 'io_kernel.compute_slowdown' must be < 1")
    l3 = top.sub("l3", {})
    cpu = top.sub("cpu")
    mooncake = file = None
    if l3.has("mooncake"):
        m = l3.sub("mooncake")
        mooncake = MooncakeSpec(
            m.num("master_rpc_s"), m.num("bytes_per_s", positive=True), m.num("latency_s"),
            m.num("capacity_bytes", positive=True),
        )
    if l3.has("file"):
        f = l3.sub("file")
        shared = f.raw("shared", False)
        if not isinstance(shared, bool):
            raise ValueError(f"{origin}: key 'l3.file.shared' must be true or false")
        file = FileSpec(
            f.num("read_bytes_per_s", positive=True), f.num("write_bytes_per_s", positive=True),
            f.num("latency_s"), f.num("capacity_bytes", positive=True), shared,
        )
    profile = HardwareProfile(
        name=top.str("name"),
        gpu=_gpu(top.sub("gpu")),
        pcie=_pcie(top.sub("pcie")),
        io_kernel=IoKernelSpec(io.num("bytes_per_s", positive=True), slowdown),
        host_memory_bytes_per_s=top.sub("host").num("memory_bytes_per_s", positive=True),
        scheduler_step_s=cpu.num("scheduler_step_s"),
        ipc_crossing_s=cpu.num("ipc_crossing_s") if cpu.has("ipc_crossing_s") else None,
        ipc_prepare_s=cpu.table("ipc_prepare_s") if cpu.has("ipc_prepare_s") else (),
        mooncake=mooncake,
        file=file,
        calibrated=_calibrated(top.sub("calibrated")) if top.has("calibrated") else None,
        source=origin,
    )
    # every hand-written key was asked for: a typo is an error, not a silent default
    # (calibration writes more measured tables than the cost model reads yet)
    top.finish(skip=("calibrated",))
    return profile
