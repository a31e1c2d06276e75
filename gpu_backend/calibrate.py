"""Microbenchmarks that turn a device into a hardware-profile dict (the brief's schema).

Measured: H2D/D2H time vs transfer size per io backend, both directions at once, per-call
copy cost, compute time per layer vs tokens (prefill) and batch size (decode), and the
compute slowdown while copies run. Figures not measured keep the base profile's value;
``sources`` says which is which. Invariant: every table is sorted by size and every
time is the median of repeated runs, queued before timing starts (on CUDA the stream
is held by a sleep kernel while the work is queued, so submission cost is excluded).

    python -m gpu_backend.calibrate --device cpu --out /tmp/cpu.yaml   (< 60 s)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpu_backend.io import Mover
from gpu_backend.model import BatchIndex, SliceSpec, SyntheticModel
from gpu_backend.pools import DevicePool, HostPool
from gpu_backend.sched_timing import measure_scheduler_step
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
    "l3": {"mooncake": {"master_rpc_s": 3.0e-4, "bytes_per_s": 20.0e9, "latency_s": 5.0e-5,
                        "capacity_bytes": 1.0e13},
           "file": {"read_bytes_per_s": 13.0e9, "write_bytes_per_s": 6.0e9, "latency_s": 1.0e-4,
                    "capacity_bytes": 4.0e12}},
}


def time_op(fn: Callable[[], Any], cuda: bool, reps: int = 7, inner: int = 1) -> float:
    """Median seconds of one ``fn`` call (``inner`` calls per timed run)."""
    for _ in range(2):  # warm up (allocator, kernel selection)
        fn()
    out = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda._sleep(2_000_000)  # hold the stream while the work is queued
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / inner)
        else:
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t) / inner)
    return statistics.median(out)


class Bench:
    """Pools sized for the largest transfer of the sweep."""

    def __init__(self, shape: ModelShape, device: str, page_size: int, pages: int) -> None:
        self.cuda = device.startswith("cuda")
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        L, h, d = shape.num_layers, shape.kv_heads_per_rank, shape.head_dim
        self.shape, self.device, self.pages = shape, device, pages
        self.dev = DevicePool(L, pages, page_size, h, d, self.dtype, device)
        self.host = {lay: HostPool(lay, L, pages, page_size, h, d, self.dtype, pin=self.cuda)
                     for lay in ("layer_first", "page_first")}
        self.page_bytes = self.dev.bytes_per_page_layer * L

    def copy_table(self, direction: str, backend: str, layout: str,
                   counts: list[int]) -> list[list[float]]:
        mover = Mover(self.dev, self.host[layout], backend)
        fn = mover.h2d if direction == "h2d" else mover.d2h
        rows = []
        for n in counts:
            pages = list(range(n))
            t = time_op(lambda p=pages: fn(p, p, range(self.shape.num_layers)), self.cuda)
            rows.append([n * self.page_bytes, t])
        return rows

    def bidirectional(self, n: int, reps: int = 16) -> float:
        """Bytes/s with ``reps`` H2D and D2H copies of ``n/2`` pages each running at once."""
        half = n // 2
        a, b = list(range(half)), list(range(half, 2 * half))
        m = Mover(self.dev, self.host["layer_first"], "direct")
        layers = range(self.shape.num_layers)
        if self.cuda:
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

            def both() -> None:
                for _ in range(reps):
                    with torch.cuda.stream(s1):
                        m.h2d(a, a, layers)
                    with torch.cuda.stream(s2):
                        m.d2h(b, b, layers)
                torch.cuda.current_stream().wait_stream(s1)
                torch.cuda.current_stream().wait_stream(s2)
        else:
            def both() -> None:
                t = threading.Thread(target=lambda: [m.d2h(b, b, layers) for _ in range(reps)])
                t.start()
                for _ in range(reps):
                    m.h2d(a, a, layers)
                t.join()
        return 2 * half * reps * self.page_bytes / time_op(both, self.cuda)

    def layer_time(self, specs: list[SliceSpec]) -> float:
        model = self._model()
        idx = BatchIndex(specs, self.dev.page_size).to(self.device)
        x = model.embed_tokens(idx)
        return time_op(lambda: model.forward_layer(0, x, idx, self.dev), self.cuda)

    def _model(self) -> SyntheticModel:
        if not hasattr(self, "_m"):
            one = ModelShape(**{**{f: getattr(self.shape, f) for f in (
                "num_heads", "num_kv_heads", "head_dim", "hidden_size", "ffn_size",
                "dtype_bytes", "tensor_parallel")}, "num_layers": 1})
            self._m = SyntheticModel(one, self.device, self.dtype, seed=0)
        return self._m

    def compute_slowdown(self, specs: list[SliceSpec], n: int) -> float:
        """Fractional slowdown of a layer while kernel-backend copies run beside it."""
        alone = self.layer_time(specs)
        stop = threading.Event()
        m = Mover(self.dev, self.host["page_first"], "kernel")
        pages = list(range(self.pages - n, self.pages))

        def copies() -> None:
            stream = torch.cuda.Stream() if self.cuda else None
            while not stop.is_set():
                if stream is not None:
                    with torch.cuda.stream(stream):
                        m.d2h(pages, pages, range(self.shape.num_layers))
                    stream.synchronize()
                else:
                    m.d2h(pages, pages, range(self.shape.num_layers))
        t = threading.Thread(target=copies)
        t.start()
        try:
            busy = self.layer_time(specs)
        finally:
            stop.set()
            t.join()
        return max(0.0, busy / alone - 1.0)


def calibrate(shape: ModelShape, device: str = "cpu", page_size: int = 16,
              quick: bool | None = None, scheduler: bool = True
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """(profile dict, source per measured key). ``scheduler``: also time the control
    plane's step (:mod:`gpu_backend.sched_timing`) into ``cpu.scheduler_step_s``;
    ``calibrated.shape`` records the model shape every table was measured with."""
    quick = (not device.startswith("cuda")) if quick is None else quick
    counts = [1, 4, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    b = Bench(shape, device, page_size, pages=max(counts) + 8)
    prof = copy.deepcopy(BASE)
    src: dict[str, str] = {}
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
    prof["io_kernel"]["bytes_per_s"] = rate["h2d/kernel"]
    tok = [16, 64, 256] if quick else [64, 256, 1024, 4096]
    bs = [1, 8, 32] if quick else [1, 8, 32, 128]
    ctx = 64 if quick else 1024
    ps = page_size

    def pages_for(n: int, first: int = 0) -> tuple[int, ...]:
        return tuple(range(first, first + -(-n // ps)))

    b_pages = max(-(-max(tok) // ps), max(bs) * -(-(ctx + 1) // ps)) + 8
    b = Bench(shape, device, page_size, pages=b_pages)
    prefill = [[t, b.layer_time([SliceSpec(0, 0, t, pages_for(t))])] for t in tok]
    per = -(-(ctx + 1) // ps)
    decode = [[n, b.layer_time([SliceSpec(i, ctx, 1, pages_for(ctx + 1, i * per))
                                for i in range(n)])] for n in bs]
    slow_specs = [SliceSpec(0, 0, tok[-1], pages_for(tok[-1]))]
    # the profile models a fractional slowdown (< 1); CPU threads under the GIL can measure
    # more than that, which means "copies and compute do not overlap": cap it at 0.95
    slowdown = b.compute_slowdown(slow_specs, n=min(8, b_pages // 4))
    prof["io_kernel"]["compute_slowdown"] = min(max(slowdown, 0.0), 0.95)
    prof["calibrated"] = {
        "device": "cuda" if b.cuda else "cpu",
        "copy": {"calls_per_row": calls,  # each row times one all-layer Mover call
                 "h2d": tables["h2d/direct"], "d2h": tables["d2h/direct"],
                 "h2d_kernel": tables["h2d/kernel"], "d2h_kernel": tables["d2h/kernel"]},
        "prefill_layer": prefill, "decode_layer": decode,
        "shape": shape.to_mapping(),  # validation warns when a scenario's shape differs
    }
    where = f"measured by gpu_backend.calibrate on {device} ({shape.name})"
    if scheduler:
        st = measure_scheduler_step(shape, device, page_size)
        prof["cpu"]["scheduler_step_s"] = st.median_s
        src["cpu.scheduler_step_s"] = (
            f"measured: median of {st.steps} working driver steps (Scheduler.step + "
            f"submission) on {device} ({shape.name}); all {st.total_steps} steps: "
            f"median {st.all_median_s:.3g} s")
    for k in ("pcie.h2d_bytes_per_s", "pcie.d2h_bytes_per_s", "pcie.bidirectional_bytes_per_s",
              "pcie.call_overhead_s", "pcie.half_efficiency_bytes", "io_kernel.bytes_per_s",
              "io_kernel.compute_slowdown", "calibrated"):
        src[k] = where
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
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = ModelShape.tiny()
    if args.model and Path(args.model).suffix in (".yaml", ".yml"):
        import yaml
        with open(args.model) as f:
            shape = ModelShape.from_mapping(yaml.safe_load(f))
    elif args.model:  # a preset name: scenarios/models/NAME.yaml
        from gpu_backend.driver import load_shape
        shape = load_shape(args.model)
    prof, src = calibrate(shape, args.device, args.page_size,
                          scheduler=not args.no_scheduler)
    prof["name"] = args.name or f"calibrated-{args.device}"
    text = to_yaml(prof, src)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
