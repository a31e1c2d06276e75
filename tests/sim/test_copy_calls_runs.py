"""``sim.host.copy_calls`` counts from page *runs*: any split of the same pages into runs
(adjacent runs left apart, as an allocation or a concatenation of backups leaves them)
gives the count the page-by-page rule gives (a call per piece where the pages stop being
consecutive on one side, or on both for ``paired``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs
from simtoys import split_pages

from sim.host import copy_calls


def _pieces(*sides: list[int]) -> int:
    """The page-by-page rule: a new piece wherever any side's next page does not follow."""
    out = 0
    prev = [-2] * len(sides)
    for at in zip(*sides, strict=True):
        if any(p != q + 1 for p, q in zip(at, prev, strict=True)):
            out += 1
        prev = list(at)
    return out




pages_pair = hs.integers(1, 30).flatmap(lambda n: hs.tuples(
    hs.lists(hs.integers(0, 40), min_size=n, max_size=n, unique=True),
    hs.lists(hs.integers(0, 40), min_size=n, max_size=n, unique=True),
    hs.sets(hs.integers(1, n)), hs.sets(hs.integers(1, n))))


@pytest.mark.parametrize(("backend", "mechanism", "layout", "legacy"), [
    ("direct", "gather_dma", "layer_first", False), ("direct", "gather_dma", "page_first", False),
    ("kernel", "gather_dma", "layer_first", False), ("kernel", "gather_dma", "page_first", False),
    ("kernel", "sm_zero_copy", "layer_first", False),
    ("direct", "gather_dma", "layer_first", True)])
@given(pair=pages_pair, layers=hs.integers(1, 4), all_layers=hs.booleans())
def test_calls_from_runs_are_calls_from_pages(backend, mechanism, layout, legacy, pair, layers,
                                             all_layers) -> None:
    src, dst, src_cuts, dst_cuts = pair
    n = len(src)
    if backend == "direct":
        per = _pieces(src, dst) if layout == "layer_first" else n
        want = _pieces(src, dst) * layers if legacy else 2 * per * layers
    elif mechanism == "sm_zero_copy":
        want = 1
    else:
        h = _pieces(src)  # src lives in L2 (a load)
        want = 2 * h * layers if layout == "layer_first" else (2 * h if all_layers else 2 * n)
    src_runs = split_pages(src, src_cuts)
    got = copy_calls(backend, mechanism, layout, n, src_runs, split_pages(dst, dst_cuts),
                     src_runs, layers, all_layers, legacy=legacy)
    assert got == want


@given(parts=hs.lists(hs.lists(hs.integers(0, 30), min_size=1, max_size=6, unique=True),
                      min_size=1, max_size=4))
def test_concatenated_runs_count_as_the_concatenated_pages(parts) -> None:
    """Backups of one batch are counted over their runs one after another: a run of one
    backup that the next backup's first run continues is one piece, as the pages are."""
    pages = [p for part in parts for p in part]
    runs = [r for part in parts for r in split_pages(part, set())]
    got = copy_calls("kernel", "gather_dma", "layer_first", len(pages), runs, runs, runs, 1,
                     True)
    assert got == 2 * _pieces(pages)
