"""The simulated runtime's configuration: the sizes, flags and per-page byte tables fixed
when it is built.

Invariant: frozen for the runtime's life (restarts included): nothing a batch does
changes a field, so every component may read it without copying. ``layer_bytes[pool][i]``
is what one page of ``pool`` holds in layer ``i``; ``bytes_per_page`` its sum over the
layers and ``layers_touched`` the layers it holds anything in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from hicache.runtime.handles import Kind
from sim.hardware.model import ModelPreset
from sim.hardware.profile import HardwareProfile

_FULL = Kind.FULL


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    runtime_id: str
    page_size: int
    device_sizes: dict[Kind, int]
    host_sizes: dict[Kind, int]
    num_layers: int
    layerwise: bool
    trace_layers: bool
    fold_layers: bool
    # the host layout decides how many copy calls a page run costs (sim.host)
    mem_layout: Literal["layer_first", "page_first"]
    backup_throttle: float | None
    # the pools' hand-out order: "lowest" (the torch runtime's) or ablation's "lifo"
    order: Literal["lowest", "lifo"]
    swa_window: int  # tokens an SWA pool keeps (0: no SWA pool kept)
    mamba: bool  # a MAMBA pool keeps per-request state
    state_copy_s: float  # one MAMBA state copy in HBM
    layer_bytes: dict[Kind, tuple[int, ...]]
    bytes_per_page: dict[Kind, int]
    layers_touched: dict[Kind, int]

    @classmethod
    def build(cls, profile: HardwareProfile, model: ModelPreset, *, runtime_id: str,
              page_size: int, device_pages: Mapping[Kind, int],
              host_pages: Mapping[Kind, int], layerwise: bool, trace_layers: bool,
              fold_layers: bool, mem_layout: str, backup_throttle: float | None
              ) -> RuntimeConfig:
        """The configuration of a runtime on ``profile`` running ``model`` (pools checked
        by the caller: a FULL device pool exists)."""
        if page_size <= 0:
            raise ValueError("page_size must be > 0")
        layer_bytes = _layer_bytes(model, page_size, set(device_pages) | set(host_pages))
        return cls(
            runtime_id=runtime_id, page_size=page_size, device_sizes=dict(device_pages),
            host_sizes=dict(host_pages), num_layers=model.num_layers, layerwise=layerwise,
            trace_layers=trace_layers, fold_layers=fold_layers,
            mem_layout="page_first" if mem_layout.startswith("page_first") else "layer_first",
            backup_throttle=backup_throttle,
            order="lifo" if "page_order" in profile.ablate else "lowest",
            swa_window=(model.sliding_window if Kind.SWA in device_pages
                        and (model.count("swa") or model.windowed) else 0),
            mamba=Kind.MAMBA in device_pages and model.count("mamba") > 0,
            state_copy_s=model.mamba_state_bytes_per_request() / profile.gpu.hbm_bytes_per_s,
            layer_bytes=layer_bytes,
            bytes_per_page={p: sum(b) for p, b in layer_bytes.items()},
            layers_touched={p: sum(1 for x in b if x) for p, b in layer_bytes.items()})


def _layer_bytes(model: ModelPreset, page_size: int, pools: set[Kind]
                 ) -> dict[Kind, tuple[int, ...]]:
    """Bytes one page of each pool holds in each layer. SWA layers' KV is a sidecar of
    FULL pages unless an SWA pool exists; a MAMBA page is one request's state (the
    model names its layers' kinds: "full", "swa", "mamba")."""
    out = {_FULL: model.layer_page_bytes(("full",) if Kind.SWA in pools
                                         else ("full", "swa"), page_size)}
    if Kind.SWA in pools:
        out[Kind.SWA] = model.swa_page_bytes(page_size)
    if Kind.MAMBA in pools:
        out[Kind.MAMBA] = tuple(model.mamba_state_bytes if k == "mamba" else 0
                                for k in model.layer_kinds)
    return out
