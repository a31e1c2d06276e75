"""The simulator counts the copy calls the torch runtime really issues: for random page
lists, every backend and host layout, layer-wise and all-layer ops alike,
``sim.host.copy_calls`` equals ``gpu_backend.io.Mover.calls``."""

from __future__ import annotations

import random

import pytest

from gpu_backend.io import Mover
from sim.host import copy_calls
from tests.gpu_backend.builders import make_pools

LAYERS = 4  # the tiny shape


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("backend", ["direct", "kernel"])
def test_the_simulator_counts_the_runtime_s_copy_calls(backend, layout):
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
            mover.h2d(dev_pages, host_pages, layers)
            got = mover.calls - before
            want = copy_calls(backend, "gather_dma", layout, host_pages, dev_pages, host_pages,
                              len(layers), len(layers) == LAYERS)
            assert got == want, (backend, layout, dev_pages, host_pages, layers)
