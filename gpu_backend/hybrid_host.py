"""L2 pools of a hybrid model's state components on the torch runtime, and their copies.

    swa    pinned host pages (2, swa layers, pages, page, H, D) in the runtime's host
           layout; a page moves with every SWA layer (gpu_backend.io.Mover, direct)
    mamba  pinned host slots (slots, mamba layers, hidden); a checkpoint moves as one blob

Backups (D2H) run on the d2h lane after their batch's compute; loads (H2D) run on the
h2d lane at prepare, before the batch's first layer (which copies a loaded checkpoint
into the request's private slot, copy-on-write) and the SWA layers that read the window.
Invariant: a state page or slot is read or written only by ops fenced on it
(gpu_backend.page_fences), so an L2 or L1 page freed under a copy waits for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpu_backend.hybrid import StateData
from gpu_backend.io import Mover
from gpu_backend.pools import HostPool, PageAllocator
from gpu_backend.shapes import ModelShape
from hicache.runtime.handles import Kind

Copy = tuple[Kind, list[int], list[int]]  # (pool, L2 pages, L1 pages) or (pool, L1, L2)


class StateHost:
    """The SWA and MAMBA L2 pools (those of ``host_pages`` the runtime keeps on L1)."""

    def __init__(self, shape: ModelShape, data: StateData, host_pages: dict[Kind, int],
                 layout: str, page_size: int, dtype: torch.dtype, pin: bool,
                 wait_timeout_s: float) -> None:
        self.data = data
        self.allocs: dict[Kind, PageAllocator] = {}
        self.bytes_per_page: dict[Kind, int] = {}
        if host_pages.get(Kind.SWA) and data.window:
            self.swa = HostPool(layout, data.swa.num_layers, host_pages[Kind.SWA], page_size,
                                shape.kv_heads_per_rank, shape.head_dim, dtype, pin)
            self.swa_mover = Mover(data.swa, self.swa, "direct")
            self.allocs[Kind.SWA] = PageAllocator(host_pages[Kind.SWA], "L2 swa",
                                                  wait_timeout_s)
            self.bytes_per_page[Kind.SWA] = (data.swa.bytes_per_page_layer
                                             * data.swa.num_layers)
        if host_pages.get(Kind.MAMBA) and data.mamba:
            self.mamba = torch.zeros((host_pages[Kind.MAMBA], *data.state.shape[1:]),
                                     dtype=dtype, pin_memory=pin)
            self.allocs[Kind.MAMBA] = PageAllocator(host_pages[Kind.MAMBA], "L2 mamba",
                                                    wait_timeout_s)
            self.bytes_per_page[Kind.MAMBA] = (data.state[0].numel()
                                               * data.state.element_size())

    def nbytes(self, copies: Sequence[Copy]) -> int:
        return sum(len(a) * self.bytes_per_page[pool] for pool, a, _ in copies)

    def load(self, copies: Sequence[Copy]) -> None:
        """H2D: each (pool, L2 pages, L1 pages)."""
        for pool, host, dev in copies:
            if pool is Kind.SWA:
                self.swa_mover.h2d(dev, host, range(self.data.swa.num_layers))
            else:
                state = self.data.state
                src = self.mamba.index_select(0, torch.tensor(host))
                state.index_copy_(0, torch.tensor(dev, device=state.device),
                                  src.to(state.device, non_blocking=state.is_cuda))

    def backup(self, copies: Sequence[Copy]) -> None:
        """D2H: each (pool, L1 pages, L2 pages)."""
        for pool, dev, host in copies:
            if pool is Kind.SWA:
                self.swa_mover.d2h(dev, host, range(self.data.swa.num_layers))
            else:
                state = self.data.state
                src = state.index_select(0, torch.tensor(dev, device=state.device))
                self.mamba.index_copy_(0, torch.tensor(host), src.cpu())
