"""PagePool.allocate_runs hands out what allocate hands out, as runs, and the runtime's
extents and rows built from those runs are the ones built from the pages (prepare builds
them from runs: the same extents and rows, at a cost per run)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from hicache.runtime.handles import Kind, RequestRuntimeHandle, Tier, coalesce
from hicache.runtime.page_ids import merged, pages_of, runs_of
from sim.memory import Memory
from sim.ops import split_runs
from sim.pools import CapacityError, PagePool
from sim.rows import RequestRow


@pytest.mark.parametrize("order", ["lifo", "lowest"])
def test_allocate_runs_hands_out_what_allocate_hands_out(order: str) -> None:
    rng = random.Random(11)
    by_pages = PagePool(Tier.DEVICE, Kind.FULL, 200, order=order)
    by_runs = PagePool(Tier.DEVICE, Kind.FULL, 200, order=order)
    held: list[int] = []
    for _ in range(400):
        if held and rng.random() < 0.45:  # free a scattered handful: fragmented free lists
            gone = rng.sample(held, rng.randint(1, min(6, len(held))))
            held = [p for p in held if p not in gone]
            by_pages.free(gone)
            by_runs.free(gone)
            continue
        n = rng.randint(0, min(9, by_pages.free_count))
        pages = by_pages.allocate(n)
        runs = by_runs.allocate_runs(n)
        assert pages_of(runs) == pages
        assert tuple(coalesce(pages)) == tuple(coalesce(pages_of(merged(runs))))
        assert merged(runs) == runs_of(pages)
        held += pages
    assert by_pages.free_count == by_runs.free_count


def test_allocate_runs_refuses_what_it_cannot_hold() -> None:
    pool = PagePool(Tier.HOST, Kind.FULL, 4)
    with pytest.raises(CapacityError):
        pool.allocate_runs(5)
    assert pool.allocate_runs(0) == [] and pool.free_count == 4


def test_a_row_appended_with_its_runs_is_the_row_appended_page_by_page() -> None:
    rng = random.Random(2)
    for _ in range(200):
        plain = RequestRow(RequestRuntimeHandle("sim0", 0, 1), rid=1)
        with_runs = RequestRow(RequestRuntimeHandle("sim0", 0, 1), rid=1)
        nxt = 0
        for _ in range(rng.randint(1, 5)):
            runs = []
            for _ in range(rng.randint(0, 3)):  # runs that may continue each other
                nxt += rng.choice((0, 0, 2))
                n = rng.randint(1, 3)
                runs.append((nxt, n))
                nxt += n
            plain.append(pages_of(runs), own=True)
            with_runs.append_runs(runs, own=True)
        assert with_runs.pages == plain.pages and with_runs.own == plain.own
        assert (with_runs.size, with_runs.owned) == (len(plain.pages), len(plain.own))
        assert with_runs.runs == plain.runs == list(coalesce(plain.pages))


@pytest.mark.parametrize("order", ["lifo", "lowest"])
def test_a_prefetch_frees_and_keeps_by_runs_what_it_did_by_pages(order: str) -> None:
    """A prefetch holds its reservation as the allocation's runs (sim.ops.prefetch_op):
    cut after the pages it fetched (split_runs), it frees the rest as free(pages[got:])
    did, page for page and run for run, and its extent is coalesce(pages[:got])."""
    rng = random.Random(5)
    by_pages = PagePool(Tier.HOST, Kind.FULL, 300, order=order)
    by_runs = PagePool(Tier.HOST, Kind.FULL, 300, order=order)
    rt = SimpleNamespace(runtime_id="r", generation=0)
    held: list[list[tuple[int, int]]] = []  # reservations, as allocate_runs handed out
    for _ in range(600):
        if held and rng.random() < 0.5:  # a fetch ends: keep `got` pages, free the rest
            runs = held.pop(rng.randrange(len(held)))
            pages = pages_of(runs)
            got = rng.choice([0, len(pages), rng.randint(0, len(pages))])
            fetched, rest = split_runs(runs, got)
            assert pages_of(fetched) == pages[:got] and pages_of(rest) == pages[got:]
            assert merged(rest) == runs_of(pages[got:])
            assert Memory.extent(rt, Tier.HOST, fetched, Kind.FULL).page_runs == \
                coalesce(pages[:got])  # type: ignore[arg-type]
            by_pages.free(pages[got:])
            if rest:
                by_runs.free_runs(merged(rest))
            if got:  # the fetched pages, freed later
                by_pages.free(pages[:got])
                by_runs.free(pages[:got])
            continue
        n = rng.randint(0, min(40, by_pages.free_count))
        runs = by_runs.allocate_runs(n)
        assert by_pages.allocate(n) == pages_of(runs)
        assert split_runs(runs, n) == (runs, []) and split_runs(runs, 0) == ([], runs)
        held.append(runs)
        assert by_pages.free_count == by_runs.free_count
    assert by_pages.allocate(by_pages.free_count) == by_runs.allocate(by_runs.free_count)
