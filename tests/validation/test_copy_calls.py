"""The simulator counts the copy calls the torch runtime really issues: for random page
lists, every backend and host layout, both directions, layer-wise and all-layer ops alike,
``sim.host.copy_calls`` equals ``gpu_backend.io.Mover.calls``; and both runtimes place
pages alike (lowest free id first), so the same plans give the same page runs."""

from __future__ import annotations

import random

import pytest

from gpu_backend.io import Mover
from hicache.runtime.handles import Kind
from hicache.runtime.page_ids import runs_of
from sim.host import copy_calls
from tests.gpu_backend.builders import make_pools

LAYERS = 4  # the tiny shape


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("backend", ["direct", "kernel"])
def test_the_simulator_counts_the_runtime_s_copy_calls(backend, layout, direction):
    rng = random.Random(7)
    dev, host = make_pools(layout, dev_pages=64, host_pages=64)
    mover = Mover(dev, host, backend)
    for _ in range(40):
        n = rng.randint(1, 12)
        dev_pages = rng.sample(range(64), n) if rng.random() < 0.5 else list(range(n))
        host_pages = sorted(rng.sample(range(64), n)) if rng.random() < 0.5 else list(
            range(10, 10 + n))
        for layers in (range(rng.randrange(LAYERS), LAYERS), range(1, 2), range(LAYERS)):
            before = mover.calls
            getattr(mover, direction)(dev_pages, host_pages, layers)
            got = mover.calls - before
            src, dst = ((host_pages, dev_pages) if direction == "h2d"
                        else (dev_pages, host_pages))
            want = copy_calls(backend, "gather_dma", layout, n, runs_of(src), runs_of(dst),
                              runs_of(host_pages), len(layers), len(layers) == LAYERS)
            assert got == want, (backend, layout, dev_pages, host_pages, layers)


def test_both_runtimes_hand_out_the_same_pages():
    """The simulator's free list and the torch runtime's allocator, given the same
    allocations and frees, return the same page ids (frees without fences)."""
    from gpu_backend.pools import PageAllocator
    from hicache.runtime.handles import Tier
    from sim.pools import PagePool

    rng = random.Random(3)
    sim, torch_alloc = PagePool(Tier.DEVICE, Kind.FULL, 256), PageAllocator(256)
    held: list[list[int]] = []
    for _ in range(400):
        if held and (rng.random() < 0.45 or sim.free_count < 16):
            pages = held.pop(rng.randrange(len(held)))
            sim.free(pages)
            torch_alloc.free(pages)
        else:
            n = rng.randint(1, 16)
            got = sim.allocate(n)
            assert got == torch_alloc.alloc(n)
            held.append(got)
