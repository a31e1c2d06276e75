"""Physical KV storage the runtime owns: device pools, the pinned host pool, free lists
and the request-to-token table.

Invariants:
- A page id is either free, allocated, or waiting behind a *fence* (the last op of every
  lane at the time it was freed); it is handed out again only after its fence completed,
  so in-flight copies and compute never see a page reused under them.
- Allocation hands out the lowest free ids first, so fresh extents are mostly one run.
- Allocation waits on fences at most ``wait_timeout_s`` in all, then raises
  :class:`FenceTimeout` naming the pool, the pages and the lanes it waited for.
- Page bytes for L3 are layout independent: the logical (2, L, page, H, D) slice.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from hicache.runtime.handles import RequestRuntimeHandle, StaleHandleError
from hicache.runtime.interface import CapacityError  # one type for every runtime

LAYOUTS = ("layer_first", "page_first")


class FenceTimeout(TimeoutError):
    """Pages freed behind a fence did not come back in time: an op on a lane is stuck."""


class Fence(Protocol):
    def is_done(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class PageAllocator:
    """Thread-safe free list of ``num_pages`` page ids with fenced (deferred) frees."""

    def __init__(self, num_pages: int, name: str = "pool",
                 wait_timeout_s: float = 120.0) -> None:
        self.name = name
        self.num_pages = num_pages
        self.wait_timeout_s = wait_timeout_s
        self._free = list(range(num_pages))
        self._allocated: set[int] = set()
        self._pending: list[tuple[tuple[Fence, ...], list[int]]] = []
        self._lock = threading.Lock()

    @property
    def num_free(self) -> int:
        """Pages free now or once their fences complete."""
        with self._lock:
            return len(self._free) + sum(len(p) for _, p in self._pending)

    @property
    def num_allocated(self) -> int:
        with self._lock:
            return len(self._allocated)

    def is_allocated(self, page: int) -> bool:
        with self._lock:
            return page in self._allocated

    def check_allocated(self, pages: Iterable[int], what: str) -> None:
        with self._lock:
            bad = [p for p in pages if p not in self._allocated]
        if bad:
            raise ValueError(f"{what}: {self.name} pages {bad[:8]} are not allocated")

    def alloc(self, n: int) -> list[int]:
        """``n`` page ids, lowest first; blocks on fences of pending frees if it must, at
        most ``wait_timeout_s`` in all (then :class:`FenceTimeout`)."""
        if n <= 0:
            return []
        deadline = time.monotonic() + self.wait_timeout_s
        while True:
            with self._lock:
                self._reap_locked()
                if len(self._free) >= n:
                    pages = [heapq.heappop(self._free) for _ in range(n)]
                    self._allocated.update(pages)
                    return pages
                if not self._pending:
                    raise CapacityError(
                        f"{self.name}: {n} pages requested, {len(self._free)} free "
                        f"of {self.num_pages}")
                fences, waiting = self._pending[0]
            for f in fences:
                if not f.wait(max(0.0, deadline - time.monotonic())):
                    lanes = sorted({getattr(g, "lane", "?") for g in fences if not g.is_done()})
                    raise FenceTimeout(
                        f"{self.name}: {n} pages requested, {len(self._free)} free; waited "
                        f"{self.wait_timeout_s:.3g} s for {len(waiting)} freed pages whose "
                        f"fence (the last op on lanes {lanes}) did not complete")

    def free(self, pages: Sequence[int], fence: Sequence[Fence] = ()) -> None:
        """Return pages; with a fence they become reusable once every fence event is done."""
        if not pages:
            return
        with self._lock:
            bad = [p for p in pages if p not in self._allocated]
            if bad or len(set(pages)) != len(pages):
                raise ValueError(f"{self.name}: freeing pages not allocated: {bad[:8]}")
            self._allocated.difference_update(pages)
            pending = tuple(f for f in fence if not f.is_done())
            if pending:
                self._pending.append((pending, list(pages)))
            else:
                for p in pages:
                    heapq.heappush(self._free, p)

    def _reap_locked(self) -> None:
        keep = []
        for fences, pages in self._pending:
            if all(f.is_done() for f in fences):
                for p in pages:
                    heapq.heappush(self._free, p)
            else:
                keep.append((fences, pages))
        self._pending = keep


class DevicePool:
    """K and V of every layer: ``kv[0, l]`` (K) and ``kv[1, l]`` (V) are each
    ``[num_pages, page_size, kv_heads, head_dim]`` and contiguous."""

    def __init__(self, num_layers: int, num_pages: int, page_size: int, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str) -> None:
        self.page_size = page_size
        self.num_layers = num_layers
        self.kv = torch.zeros((2, num_layers, num_pages, page_size, kv_heads, head_dim),
                              dtype=dtype, device=device)

    def k(self, layer: int) -> torch.Tensor:
        return self.kv[0, layer]

    def v(self, layer: int) -> torch.Tensor:
        return self.kv[1, layer]

    def page_tensor(self, page: int) -> torch.Tensor:
        """The logical (2, L, page, H, D) view of one page."""
        return self.kv[:, :, page]

    @property
    def bytes_per_page_layer(self) -> int:
        return self.kv[:, 0, 0].numel() * self.kv.element_size()


class HostPool:
    """The L2 pool: ``layer_first`` (2, L, pages, page, H, D) or ``page_first``
    (2, pages, L, page, H, D); pinned when CUDA is available."""

    def __init__(self, layout: str, num_layers: int, num_pages: int, page_size: int,
                 kv_heads: int, head_dim: int, dtype: torch.dtype, pin: bool) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"unknown host layout {layout!r}; expected one of {LAYOUTS}")
        self.layout = layout
        self.num_layers = num_layers
        inner = (page_size, kv_heads, head_dim)
        shape = ((2, num_layers, num_pages, *inner) if layout == "layer_first"
                 else (2, num_pages, num_layers, *inner))
        self.data = torch.zeros(shape, dtype=dtype, pin_memory=pin)

    def page_tensor(self, page: int) -> torch.Tensor:
        """The logical (2, L, page, H, D) view of one page (a view, maybe strided)."""
        return self.data[:, :, page] if self.layout == "layer_first" else self.data[:, page]

    def page_bytes(self, page: int) -> bytes:
        t = self.page_tensor(page).contiguous()
        return t.view(torch.uint8).numpy().tobytes()

    def load_page_bytes(self, page: int, blob: bytes) -> None:
        dst = self.page_tensor(page)
        expect = dst.numel() * dst.element_size()
        if len(blob) != expect:
            raise ValueError(f"page blob of {len(blob)} bytes, expected {expect}")
        src = torch.frombuffer(bytearray(blob), dtype=torch.uint8).view(dst.dtype)
        dst.copy_(src.view(dst.shape))


@dataclass
class Row:
    """One request's KV: device pages in token order and the tokens they hold."""

    rid: int
    pages: list[int] = field(default_factory=list)
    tokens: int = 0
    owned: list[int] = field(default_factory=list)  # pages the runtime allocated for it


class ReqToTokenTable:
    """Request slots with a generation each; a closed slot's old handles are stale. Slot
    generations of runtime generation g start at g * 2**32, so a restarted runtime refuses
    the handles its predecessor issued."""

    def __init__(self, runtime_id: str, max_slots: int, generation: int = 0) -> None:
        self.runtime_id = runtime_id
        self._gen = [generation << 32] * max_slots
        self._rows: dict[int, Row] = {}
        self._free = list(range(max_slots))
        heapq.heapify(self._free)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def open(self, rid: int) -> tuple[RequestRuntimeHandle, Row]:
        if not self._free:
            raise CapacityError(f"all {len(self._gen)} request slots are open")
        slot = heapq.heappop(self._free)
        row = self._rows[slot] = Row(rid)
        return RequestRuntimeHandle(self.runtime_id, slot, self._gen[slot]), row

    def get(self, h: RequestRuntimeHandle) -> Row:
        if h.runtime_id != self.runtime_id:
            raise StaleHandleError(f"request handle of runtime {h.runtime_id!r}")
        if not 0 <= h.slot_id < len(self._gen) or h.slot_id not in self._rows \
                or self._gen[h.slot_id] != h.generation:
            raise StaleHandleError(f"request handle {h} is stale (slot closed or reused)")
        return self._rows[h.slot_id]

    def close(self, h: RequestRuntimeHandle) -> Row:
        row = self.get(h)
        del self._rows[h.slot_id]
        self._gen[h.slot_id] += 1
        heapq.heappush(self._free, h.slot_id)
        return row
