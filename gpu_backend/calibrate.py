"""Microbenchmarks that turn a device into a hardware-profile dict (the shared schema).

Measured (each with a source comment in the YAML):
- copies: H2D/D2H time vs size per io backend (one all-layer Mover call per row), both
  directions at once, host time to issue one copy call (CUDA) (:mod:`calib_bench`);
- compute: one layer over a grid of batch shapes (tokens x context for prefill, batch x
  context for decode), the embedding, the LM head with sampling, and the slowdown of
  compute beside copy kernels (:mod:`calib_compute`);
- host: lane submit cost and inter-op gap, per-layer launch (CUDA), batch setup and
  prepare_batch time on the driver thread (:mod:`calib_host`);
- the interpreter lock (CPU): how fast the driver thread and a lane's worker run beside
  each other (:mod:`calib_gil`);
- in situ: a short calibration scenario on the torch runtime, for the driver's time
  between batches and how the loop's ops differ from the hot microbenchmarks
  (:mod:`calib_insitu`).
Figures not measured keep the base profile's value. The simulator fits its cost model to
the measured points (:mod:`sim.cost`); calibration fits nothing but the copy peaks.

    python -m gpu_backend.calibrate --device cpu --out /tmp/cpu.yaml   (< 60 s)
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import torch

from gpu_backend.calib_bench import CopyBench, time_op  # noqa: F401 - time_op re-exported
from gpu_backend.calib_compute import GRIDS, measure_compute
from gpu_backend.calib_gil import measure_interpreter
from gpu_backend.calib_host import measure_host
from gpu_backend.calib_insitu import in_situ
from gpu_backend.priority import high_priority
from gpu_backend.shapes import ModelShape

BASE: dict[str, Any] = {  # docs/SOURCES.md §4 (H100/H200 SXM) unless measured
    "name": "calibrated",
    "gpu": {"bf16_flops": 989.0e12, "matmul_efficiency": 0.6, "hbm_bytes_per_s": 4.3e12,
            "kernel_launch_s": 5.0e-6},
    "pcie": {"h2d_bytes_per_s": 55.0e9, "d2h_bytes_per_s": 55.0e9,
             "bidirectional_bytes_per_s": 83.0e9, "call_overhead_s": 6.0e-6,
             "half_efficiency_bytes": 131072, "copy_engines": 3},
    "io_kernel": {"bytes_per_s": 55.0e9, "compute_slowdown": 0.06},
    "host": {"memory_bytes_per_s": 200.0e9},
    "cpu": {"scheduler_step_s": 2.0e-4},
    "l3": {"mooncake": {"master_rpc_s": 3.0e-4, "latency_s": 5.0e-5, "capacity_bytes": 1.0e13,
                        "nic_bytes_per_s": 23.75e9, "node_bytes_per_s": 190.0e9, "nodes": 4},
           "file": {"read_bytes_per_s": 13.0e9, "write_bytes_per_s": 6.0e9, "latency_s": 1.0e-4,
                    "capacity_bytes": 4.0e12}},
}


def calibrate(shape: ModelShape, device: str = "cpu", page_size: int = 16,
              quick: bool | None = None, scheduler: bool = True
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """(profile dict, source per measured key). ``quick`` (default on CPU): the small grid;
    ``scheduler``: also time the control plane's step into ``cpu.scheduler_step_s``;
    ``calibrated.shape`` records the model shape every table was measured with."""
    quick = (not device.startswith("cuda")) if quick is None else quick
    grid = "quick" if quick else "full"
    counts = [1, 4, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    b = CopyBench(shape, device, page_size, pages=max(counts) + 16)
    prof = copy.deepcopy(BASE)
    src: dict[str, str] = {}
    where = f"measured by gpu_backend.calibrate on {device} ({shape.name})"
    tables = {f"{d}/{be}": b.copy_table(d, be, "layer_first", counts)
              for d in ("h2d", "d2h") for be in ("direct", "kernel")}
    rate = {k: max(n / t for n, t in v) for k, v in tables.items()}
    for d in ("h2d", "d2h"):
        prof["pcie"][f"{d}_bytes_per_s"] = rate[f"{d}/direct"]
    prof["pcie"]["bidirectional_bytes_per_s"] = b.bidirectional(max(counts))
    small = tables["h2d/direct"][0]
    calls = 2 * shape.num_layers  # one copy per (K/V, layer) for one page
    prof["pcie"]["call_overhead_s"] = small[1] / calls
    peak = rate["h2d/direct"]
    prof["pcie"]["half_efficiency_bytes"] = int(next(
        (n for n, t in tables["h2d/direct"] if n / t >= peak / 2), tables["h2d/direct"][-1][0]))
    # torch cannot build SGLang's zero-copy SM kernel: its "kernel" backend gathers on the
    # device and moves the staging buffer by DMA; the profile names that mechanism
    prof["io_kernel"].update({"bytes_per_s": rate["h2d/kernel"], "mechanism": "gather_dma"})
    prof["gpu"]["hbm_bytes_per_s"] = b.device_copy_rate()
    compute = measure_compute(shape, device, page_size, grid)
    # the profile models a fractional slowdown (< 1); CPU threads under the GIL can measure
    # more than that, which means "copies and compute do not overlap": cap it at 0.95
    prof["io_kernel"]["compute_slowdown"] = min(max(float(compute.pop("slowdown")), 0.0), 0.95)
    points = [tuple(p[:3]) for p in compute["prefill"] + compute["decode"]]
    host = measure_host(shape, device, page_size, points)
    prof["cpu"].update({k: host[k] for k in ("op_submit_s", "op_gap_s", "layer_launch_s")})
    prof["cpu"]["copy_issue_s"] = b.issue_per_call()
    prof["calibrated"] = {
        "device": "cuda" if b.cuda else "cpu",
        "copy": {"calls_per_row": calls,  # each row times one all-layer Mover call
                 "h2d": tables["h2d/direct"], "d2h": tables["d2h/direct"],
                 "h2d_kernel": tables["h2d/kernel"], "d2h_kernel": tables["d2h/kernel"]},
        "compute": compute,
        "host": {"setup": host["setup"], "prepare": host["prepare"]},
        "shape": shape.to_mapping(),  # validation warns when a scenario's shape differs
    }
    # CPU: lane workers run Python under the driver thread's GIL: how fast each side runs
    # beside the other is measured (sim.interpreter); CUDA streams run what the driver
    # issued at once
    if not b.cuda:
        # the lock's hand-overs, measured where other processes cannot preempt the two
        # threads (falls back when real-time priority is not permitted): on a loaded box
        # a normal-priority run measures the CPU's availability instead (wake-ups of 1 ms)
        with high_priority("fifo") as applied:
            prof["cpu"]["interpreter"] = measure_interpreter()
        src["cpu.interpreter"] = f"priority {applied}"
    if scheduler:
        ins = in_situ(shape, device, page_size, host["op_submit_s"])
        prof["cpu"]["scheduler_step_s"] = ins.pop("scheduler_step_s")
        prof["cpu"]["admit_step_s"] = ins.pop("admit_step_s")
        for k in ("wakeup_s", "finish_step_s", "insert_step_s"):
            prof["cpu"][k] = ins.pop(k)
        gaps = ins.pop("gaps")
        prof["calibrated"]["in_situ"] = ins
        src["cpu.scheduler_step_s"] = (
            f"measured: median from the driver's wake-up to the next decode batch's "
            f"prepare_batch ({gaps} gaps timed, calibration scenario, {device}, "
            f"{shape.name})")
        src["cpu.admit_step_s"] = ("measured: how much longer the gap is before a prefill "
                                   "batch (finish, admit, prefix match)")
        src["cpu.wakeup_s"] = ("measured: median from a batch's completion to the driver's "
                               "next scheduler step (the driver thread waking up)")
        src["cpu.finish_step_s"] = ("measured: a step's extra time per request that finished "
                                    "(release, the workload's follow-up)")
        src["cpu.insert_step_s"] = ("measured: a step's extra time after a prefill batch "
                                    "(its prompts enter the tree)")
    for k in prof["cpu"].get("interpreter", {}):
        src[f"cpu.interpreter.{k}"] = (
            f"measured by gpu_backend.calib_gil on {device} ({src.get('cpu.interpreter')}): "
            + ("a thread's wake-up after the driver blocks" if k == "wake_s"
               else "speed beside another thread holding the GIL"))
    src["gpu.hbm_bytes_per_s"] = where + ": a device-to-device copy, read + write"
    for k in ("pcie.h2d_bytes_per_s", "pcie.d2h_bytes_per_s", "pcie.bidirectional_bytes_per_s",
              "pcie.call_overhead_s", "pcie.half_efficiency_bytes", "io_kernel.bytes_per_s",
              "io_kernel.compute_slowdown", "cpu.op_submit_s", "cpu.op_gap_s",
              "cpu.layer_launch_s", "cpu.copy_issue_s", "calibrated"):
        src[k] = where
    src["io_kernel.mechanism"] = ("the torch runtime's kernel backend: device gather + DMA "
                                  "(SGLang's zero-copy kernel is sm_zero_copy)")
    assert set(GRIDS) >= {grid}
    return prof, src


def to_yaml(prof: dict[str, Any], src: dict[str, str]) -> str:
    """YAML with a source comment on every number (measured here, or docs/SOURCES.md)."""
    lines: list[str] = []

    def emit(d: dict[str, Any], indent: int, path: str) -> None:
        for k, v in d.items():
            key = f"{path}{k}"
            pad = "  " * indent
            if isinstance(v, dict) and k != "calibrated" and not path.startswith("calibrated"):
                lines.append(f"{pad}{k}:")
                emit(v, indent + 1, key + ".")
            elif k == "calibrated":
                lines.append(f"{pad}calibrated:  # {src.get(key, 'measured')}")
                lines.extend(f"{pad}  {x}" for x in _dump(v).splitlines())
            else:
                note = src.get(key, "default: docs/SOURCES.md §4" if path else "")
                lines.append(f"{pad}{k}: {_dump(v).strip()}" + (f"  # {note}" if note else ""))
    emit(prof, 0, "")
    return "\n".join(lines) + "\n"


def _dump(v: Any) -> str:
    import yaml
    return yaml.safe_dump(v, default_flow_style=None, sort_keys=False).replace("\n...\n", "\n")


def main(argv: list[str] | None = None) -> None:
    from gpu_backend.command import add_arguments

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    run_args(ap.parse_args(argv))


def run_args(args: argparse.Namespace) -> None:
    """Calibrate as the command line asks (see gpu_backend.command.add_arguments)."""
    out = None
    if args.out:  # refused, or found unwritable, before anything is measured
        from hicache.report.outputs import OutputFile

        out = OutputFile(Path(args.out), overwrite=getattr(args, "overwrite", False))
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = ModelShape.tiny()
    if args.device == "cpu":
        torch.set_num_threads(1)  # two threads on a shared box lose whole ticks at barriers
    if args.model and Path(args.model).suffix in (".yaml", ".yml"):
        import yaml
        with open(args.model) as f:
            shape = ModelShape.from_mapping(yaml.safe_load(f))
    elif args.model:  # a preset name: scenarios/models/NAME.yaml
        from gpu_backend.driver import load_shape
        shape = load_shape(args.model)
    prof, src = calibrate(shape, args.device, args.page_size,
                          scheduler=not args.no_scheduler)
    for k in prof["l3"]["mooncake"]:
        src.setdefault(f"l3.mooncake.{k}", "default: docs/SOURCES.md §5")
    if getattr(args, "mooncake_master", None) or getattr(args, "mooncake_local", False):
        from gpu_backend.calib_l3 import calibrate_mooncake

        calibrate_mooncake(prof, src, master=args.mooncake_master,
                           local=bool(args.mooncake_local))
    prof["name"] = args.name or f"calibrated-{args.device}"
    text = to_yaml(prof, src)
    if out is not None:
        out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
