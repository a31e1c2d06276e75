"""L1 <-> L2 copies: every layout and io backend moves pages bit for bit."""

from __future__ import annotations

import hashlib

import pytest
import torch

from gpu_backend.io import Mover, paired_runs
from tests.gpu_backend.builders import make_pools

CASES = [(lay, be) for lay in ("layer_first", "page_first") for be in ("direct", "kernel")]


def checksum(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def test_paired_runs_coalesce_only_where_both_sides_are_consecutive():
    assert paired_runs([5, 6, 7, 2], [10, 11, 3, 4]) == [(5, 10, 2), (7, 3, 1), (2, 4, 1)]
    with pytest.raises(ValueError):
        paired_runs([1, 2], [1])


@pytest.mark.parametrize("layout,backend", CASES)
@pytest.mark.parametrize("layerwise", [False, True])
def test_pages_round_trip_l1_l2_l1_bit_identical(layout, backend, layerwise):
    dev, host = make_pools(layout)
    dev.kv.copy_(torch.randn(dev.kv.shape, generator=torch.Generator().manual_seed(1)))
    src = [3, 4, 5, 9, 0]  # fragmented on the device
    mid = [7, 8, 2, 3, 11]  # fragmented differently on the host
    dst = [12, 1, 2, 13, 14]
    before = [checksum(dev.page_tensor(p)) for p in src]
    untouched = checksum(dev.kv[:, :, [6, 7, 8]])
    mover = Mover(dev, host, backend)
    L = dev.num_layers
    layers = [range(i, i + 1) for i in range(L)] if layerwise else [range(L)]
    for r in layers:
        mover.d2h(src, mid, r)
    assert [checksum(host.page_tensor(p)) for p in mid] == before
    dev.kv[:, :, dst] = 0
    for r in layers:
        mover.h2d(dst, mid, r)
    assert [checksum(dev.page_tensor(p)) for p in dst] == before
    assert checksum(dev.kv[:, :, [6, 7, 8]]) == untouched  # nothing else written


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_single_layer_copy_leaves_other_layers_alone(layout):
    for backend in ("direct", "kernel"):
        dev, host = make_pools(layout)
        dev.kv.fill_(1.0)
        Mover(dev, host, backend).d2h([0, 1], [4, 5], range(2, 3))
        page = host.page_tensor(4)
        assert bool((page[:, 2] == 1).all()) and bool((page[:, [0, 1, 3]] == 0).all())


def test_kernel_backend_absorbs_device_fragmentation_in_fewer_copies():
    dev, host = make_pools("page_first")
    scattered = [0, 2, 4, 6, 8, 10]
    contiguous_host = [0, 1, 2, 3, 4, 5]
    direct, kernel = Mover(dev, host, "direct"), Mover(dev, host, "kernel")
    direct.d2h(scattered, contiguous_host, range(dev.num_layers))
    kernel.d2h(scattered, contiguous_host, range(dev.num_layers))
    # direct: one copy per (K/V, layer, page); kernel: one gather + one copy per K/V
    assert direct.calls == 2 * dev.num_layers * len(scattered)
    assert kernel.calls == 2


def test_unknown_backend_and_bad_layer_range_are_rejected():
    dev, host = make_pools("layer_first")
    with pytest.raises(ValueError):
        Mover(dev, host, "magic")
    with pytest.raises(ValueError):
        Mover(dev, host).h2d([0], [0], range(0, 99))
