"""Copies between the device pool (L1) and the host pool (L2) for lists of page ids.

``dev_pages[i]`` and ``host_pages[i]`` hold the same page; ``layers`` is a contiguous
range (one layer for layer-wise loads, all layers for backups). Every copy moves only
chunks that are contiguous on *both* sides, so no hidden temporary or pageable staging
appears and, from pinned memory, ``non_blocking`` copies stay asynchronous.

- ``direct``: copy pool to pool. Pages are coalesced into runs contiguous on both sides;
  layer_first: one copy per (K/V, layer, run); page_first: one per (K/V, layer, page),
  since one layer of a page_first run is strided on the host.
- ``kernel``: the device side is gathered (``index_select``) into / scattered
  (``index_copy_``) out of one contiguous device staging buffer ordered like the host
  pages, so device fragmentation costs one kernel; the host side is one copy per
  contiguous host chunk (per host run; page_first single layers: per page).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpu_backend.pools import DevicePool, HostPool

IO_BACKENDS = ("direct", "kernel")


def paired_runs(dev_pages: Sequence[int], host_pages: Sequence[int]) -> list[tuple[int, int, int]]:
    """(dev_first, host_first, count) runs that are consecutive on both sides, in order."""
    if len(dev_pages) != len(host_pages):
        raise ValueError(f"{len(dev_pages)} device pages vs {len(host_pages)} host pages")
    runs: list[tuple[int, int, int]] = []
    for d, h in zip(dev_pages, host_pages, strict=True):
        if runs and runs[-1][0] + runs[-1][2] == d and runs[-1][1] + runs[-1][2] == h:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((d, h, 1))
    return runs


def _host_runs(host_pages: Sequence[int]) -> list[tuple[int, int, int]]:
    """(host_first, offset in the list, count) for consecutive host ids."""
    return [(h, off, c) for off, h, c in _offsets(paired_runs(host_pages, host_pages))]


def _offsets(runs: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out, off = [], 0
    for _, h, c in runs:
        out.append((off, h, c))
        off += c
    return out


class Mover:
    """Executes copies between one device pool and one host pool."""

    def __init__(self, dev: DevicePool, host: HostPool, backend: str = "direct") -> None:
        if backend not in IO_BACKENDS:
            raise ValueError(f"unknown io_backend {backend!r}; expected one of {IO_BACKENDS}")
        self.dev, self.host, self.backend = dev, host, backend
        self.non_blocking = dev.kv.is_cuda
        self.calls = 0  # host<->device copy calls issued (for calibration and tests)

    def h2d(self, dev_pages: Sequence[int], host_pages: Sequence[int], layers: range) -> None:
        self._move(dev_pages, host_pages, layers, to_device=True)

    def d2h(self, dev_pages: Sequence[int], host_pages: Sequence[int], layers: range) -> None:
        self._move(dev_pages, host_pages, layers, to_device=False)

    def _copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src, non_blocking=self.non_blocking)
        self.calls += 1

    def _move(self, dev_pages: Sequence[int], host_pages: Sequence[int], layers: range,
              to_device: bool) -> None:
        if layers.step != 1 or not layers or layers.stop > self.dev.num_layers:
            raise ValueError(f"layers must be a non-empty contiguous range, got {layers}")
        if not dev_pages:
            return
        if self.backend == "direct":
            self._direct(dev_pages, host_pages, layers, to_device)
        else:
            self._kernel(dev_pages, host_pages, layers, to_device)

    def _direct(self, dev_pages, host_pages, layers: range, to_device: bool) -> None:
        kv, hd = self.dev.kv, self.host.data
        for d, h, c in paired_runs(dev_pages, host_pages):
            for s in range(2):
                for lay in layers:
                    if self.host.layout == "layer_first":
                        pairs = [(kv[s, lay, d:d + c], hd[s, lay, h:h + c])]
                    else:
                        pairs = [(kv[s, lay, d + i], hd[s, h + i, lay]) for i in range(c)]
                    for dv, hv in pairs:
                        self._copy(dv, hv) if to_device else self._copy(hv, dv)

    def _kernel(self, dev_pages, host_pages, layers: range, to_device: bool) -> None:
        kv, hd = self.dev.kv, self.host.data
        lo, hi = layers.start, layers.stop
        ids = torch.tensor(list(dev_pages), dtype=torch.long).to(kv.device, non_blocking=True)
        page_first = self.host.layout == "page_first"
        sub = kv[:, lo:hi]  # (2, nl, P, page, H, D)
        shape = list(sub.shape)
        shape[2] = len(dev_pages)
        if page_first:
            shape[1], shape[2] = shape[2], shape[1]  # staging (2, n, nl, page, H, D)
        if to_device:
            staging = torch.empty(shape, dtype=kv.dtype, device=kv.device)
        else:
            staging = sub.index_select(2, ids)
            if page_first:
                staging = staging.transpose(1, 2).contiguous()
        all_layers = hi - lo == self.dev.num_layers
        for h, off, c in _host_runs(host_pages):
            for s in range(2):
                if not page_first:
                    pairs = [(staging[s, :, off:off + c], hd[s, lo:hi, h:h + c])]
                    if hi - lo > 1:  # host[s, lo:hi, run] is strided: one copy per layer
                        pairs = [(staging[s, i, off:off + c], hd[s, lo + i, h:h + c])
                                 for i in range(hi - lo)]
                elif all_layers:
                    pairs = [(staging[s, off:off + c], hd[s, h:h + c])]
                else:
                    pairs = [(staging[s, off + i], hd[s, h + i, lo:hi]) for i in range(c)]
                for st, hv in pairs:
                    self._copy(st, hv) if to_device else self._copy(hv, st)
        if to_device:
            src = staging.transpose(1, 2) if page_first else staging
            sub.index_copy_(2, ids, src)
