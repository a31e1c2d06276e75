"""Allocators, host page bytes and the request table."""

from __future__ import annotations

import threading

import pytest
import torch

from gpu_backend.pools import CapacityError, PageAllocator, ReqToTokenTable
from hicache.runtime.handles import RequestRuntimeHandle, StaleHandleError
from tests.gpu_backend.builders import make_pools


class ManualFence:
    """A fence the test completes by hand."""

    def __init__(self) -> None:
        self._ev = threading.Event()

    def is_done(self) -> bool:
        return self._ev.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._ev.wait(timeout)

    def complete(self) -> None:
        self._ev.set()


def test_allocator_hands_out_lowest_ids_first_so_extents_are_runs():
    a = PageAllocator(8)
    assert a.alloc(3) == [0, 1, 2]
    a.free([1])
    assert a.alloc(2) == [1, 3]
    assert a.num_free == 4 and a.num_allocated == 4


def test_allocator_rejects_double_free_and_over_allocation():
    a = PageAllocator(2)
    pages = a.alloc(2)
    with pytest.raises(CapacityError):
        a.alloc(1)
    a.free(pages)
    with pytest.raises(ValueError):
        a.free(pages)


def test_fenced_pages_are_not_reused_before_their_fence_completes():
    a = PageAllocator(2)
    fence = ManualFence()
    a.free(a.alloc(2), [fence])
    assert a.num_free == 2  # counted as free for accounting ...
    got: list[list[int]] = []
    t = threading.Thread(target=lambda: got.append(a.alloc(1)))
    t.start()
    t.join(0.1)
    assert t.is_alive() and not got  # ... but handed out only after the fence
    fence.complete()
    t.join(2)
    assert got == [[0]]


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_page_bytes_are_the_same_for_both_layouts(layout):
    _, host = make_pools(layout)
    ref_dev, ref_host = make_pools("layer_first")
    value = torch.arange(host.page_tensor(0).numel(), dtype=torch.float32)
    host.page_tensor(3).copy_(value.view(host.page_tensor(3).shape))
    ref_host.page_tensor(3).copy_(value.view(ref_host.page_tensor(3).shape))
    blob = host.page_bytes(3)
    assert blob == ref_host.page_bytes(3)
    host.load_page_bytes(5, blob)
    assert torch.equal(host.page_tensor(5), host.page_tensor(3))
    with pytest.raises(ValueError):
        host.load_page_bytes(5, blob[:-4])


def test_request_table_rejects_handles_of_closed_or_reused_slots():
    t = ReqToTokenTable("r0", max_slots=1)
    h, row = t.open(rid=1)
    assert t.get(h) is row
    t.close(h)
    with pytest.raises(StaleHandleError):
        t.get(h)
    h2, _ = t.open(rid=2)
    assert h2.slot_id == h.slot_id and h2.generation == h.generation + 1
    with pytest.raises(StaleHandleError):
        t.get(h)
    with pytest.raises(StaleHandleError):
        t.get(RequestRuntimeHandle("other", h2.slot_id, h2.generation))
    with pytest.raises(CapacityError):
        t.open(rid=3)
