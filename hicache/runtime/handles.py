"""Handles that the control side holds instead of physical state.

Invariant (seed 000, invariant 3): the control side holds identifiers whose lifecycle the
runtime defines, never a stream, event, pointer, tensor or free list. Every handle
carries the ``runtime_id`` and ``generation`` that issued it, so a handle that outlived
its pool (runtime restarted, slot reused) is rejected by :func:`check_generation`.

    CacheExtentRef(runtime_id, generation, tier, page_runs=(PageRun(40, 3), PageRun(7, 1)))
        = runtime pages 40, 41, 42, 7 of that tier, in token order
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, starmap

from hicache.runtime.page_ids import Run, merged, runs_of
from hicache.runtime.slot_init import slot_init, slot_twin


class Tier(enum.Enum):
    """Where a copy of KV lives: L1 GPU memory, L2 pinned host memory, L3 storage."""

    DEVICE = "L1"
    HOST = "L2"
    STORAGE = "L3"

    __hash__ = object.__hash__  # as Kind's (below): the tree's held-page counts key by it


class Kind(enum.Enum):
    """Which component's pool pages belong to: FULL KV, sliding-window KV (SWA), recurrent
    state slots (MAMBA). Extents, allocators, the tree and the runtimes key pools by it;
    the model files' layer kinds use the same names (``Kind(name)`` reads one)."""

    FULL = "full"
    SWA = "swa"
    MAMBA = "mamba"

    # members are singletons compared by identity: hash them so too, in C (they key the
    # per-node data dicts every tree walk reads; Enum's own hash is a Python call)
    __hash__ = object.__hash__

    def __str__(self) -> str:  # messages and timelines name the pool: "full"
        return self.value


def pools_of(sizes: Mapping[Kind | str, int]) -> dict[Kind, int]:
    """``sizes`` keyed by Kind (names such as "swa" accepted, as configurations write them)."""
    return {Kind(k): n for k, n in sizes.items()}


class StaleHandleError(RuntimeError):
    """A handle or extent from another runtime or an older generation was presented."""


@slot_init
@dataclass(frozen=True, slots=True)
class PageRun:
    """``page_count`` consecutive runtime page ids starting at ``first_page``."""

    first_page: int
    page_count: int

    def __post_init__(self) -> None:
        if self.page_count <= 0 or self.first_page < 0:
            raise ValueError(f"invalid PageRun({self.first_page}, {self.page_count})")

    def pages(self) -> range:
        return range(self.first_page, self.first_page + self.page_count)


_RunBuilder = slot_twin(PageRun)  # page_run's plain slot stores


def page_run(first_page: int, page_count: int) -> PageRun:
    """``PageRun(first_page, page_count)`` of a run its caller knows is valid (a pool's
    pages: ``first_page >= 0``, ``page_count >= 1``), its slots set directly: equal to the
    constructor's, without its check (a runtime builds one per run it places)."""
    r = _RunBuilder()
    r.first_page = first_page
    r.page_count = page_count
    r.__class__ = PageRun  # slot_init.slot_twin: a PageRun before anyone sees it
    return r


def coalesce(pages: Iterable[int]) -> tuple[PageRun, ...]:
    """Page ids in order -> the fewest runs that list them in the same order (a run of
    ``runs_of`` has a page at least: only a negative start needs the constructor's check,
    which refuses it)."""
    return tuple([page_run(start, count) if start >= 0 else PageRun(start, count)
                  for start, count in runs_of(pages)])


@slot_init
@dataclass(frozen=True, slots=True)
class CacheExtentRef:
    """An ordered set of runtime pages of one tier, issued by one runtime generation."""

    runtime_id: str
    generation: int
    tier: Tier
    page_runs: tuple[PageRun, ...]
    pool: Kind = Kind.FULL  # which component's pool; sidecars follow it
    _count: int | None = field(default=None, init=False, repr=False, compare=False)
    # ``runs()``'s pairs, listed once (an extent's runs are read by every check, free,
    # copy and wait that names it); a runtime that builds an extent from its runs sets
    # them at once (:func:`extent_of_runs`)
    _runs: tuple[tuple[int, int], ...] | None = field(default=None, init=False, repr=False,
                                                      compare=False)

    @property
    def num_pages(self) -> int:
        n = self._count
        if n is None:  # counted once: fragmented extents have many runs
            n = sum(r.page_count for r in self.page_runs)
            object.__setattr__(self, "_count", n)
        return n

    def pages(self) -> Iterator[int]:
        return chain.from_iterable(map(PageRun.pages, self.page_runs))  # C-level iteration

    def split(self, at_page: int) -> tuple[CacheExtentRef, CacheExtentRef]:
        """Split after ``at_page`` pages: (first at_page pages, the rest). Both non-empty."""
        if not 0 < at_page < self.num_pages:
            raise ValueError(f"split at {at_page} outside 1..{self.num_pages - 1}")
        head: list[PageRun] = []
        tail: list[PageRun] = []
        left = at_page
        for run in self.page_runs:
            if left >= run.page_count:
                head.append(run)
                left -= run.page_count
            elif left > 0:
                head.append(page_run(run.first_page, left))  # parts of a valid run
                tail.append(page_run(run.first_page + left, run.page_count - left))
                left = 0
            else:
                tail.append(run)
        return self._with(tuple(head)), self._with(tuple(tail))

    def with_pages(self, pages: Iterable[int]) -> CacheExtentRef:
        """An extent of the same runtime, generation, tier and pool over ``pages`` (in order)."""
        return self._with(coalesce(pages))

    def runs(self) -> list[tuple[int, int]]:
        """The page runs as ``(start, count)`` pairs (:mod:`hicache.runtime.page_ids`'
        ``Run``), in order: :meth:`with_runs`' input form (a new list each call: the
        caller's to change; the pairs are listed once per extent)."""
        runs = self._runs
        if runs is None:
            runs = tuple([(r.first_page, r.page_count) for r in self.page_runs])
            object.__setattr__(self, "_runs", runs)
        return list(runs)

    def with_runs(self, runs: Iterable[tuple[int, int]]) -> CacheExtentRef:
        """:meth:`with_pages` of runs ``(start, count)`` (joined where they continue)."""
        return self._with(tuple(PageRun(s, n) for s, n in merged(runs)))

    def slice(self, start: int, stop: int) -> CacheExtentRef:
        """Pages ``start:stop`` of this extent (non-empty; 0 <= start, negative stops not
        supported), computed on runs without listing pages."""
        stop = min(stop, self.num_pages)
        if start < 0 or stop <= start:
            raise ValueError(f"empty slice {start}:{stop} of {self.num_pages} pages")
        if start == 0 and stop == self.num_pages:
            return self
        runs: list[PageRun] = []
        pos = 0  # pages of the extent before this run
        for run in self.page_runs:
            count = run.page_count
            if pos + count > start:
                lo, hi = max(start, pos), min(stop, pos + count)
                runs.append(run if hi - lo == count else  # a part of a valid run
                            page_run(run.first_page + lo - pos, hi - lo))
            pos += count
            if pos >= stop:
                break
        return self._with(tuple(runs))

    @staticmethod
    def concat(parts: Iterable[CacheExtentRef]) -> CacheExtentRef:
        """Join extents of one runtime, generation and tier, in order (one extent: that
        extent itself)."""
        parts = list(parts)
        if not parts:
            raise ValueError("concat of no extents")
        first = parts[0]
        if len(parts) == 1:  # a request's usual KV (one allocation) or kept pages
            return first
        for p in parts[1:]:
            if p._domain() != first._domain():
                raise ValueError("concat of extents from different runtimes, generations, "
                                 "tiers or pools")
        runs: list[PageRun] = []
        for part in parts:
            for run in part.page_runs:
                last = runs[-1] if runs else None
                if last is not None and last.first_page + last.page_count == run.first_page:
                    runs[-1] = page_run(last.first_page, last.page_count + run.page_count)
                else:
                    runs.append(run)
        return first._with(tuple(runs))

    def _domain(self) -> tuple[str, int, Tier, Kind]:
        return (self.runtime_id, self.generation, self.tier, self.pool)

    def _with(self, runs: tuple[PageRun, ...]) -> CacheExtentRef:
        return CacheExtentRef(self.runtime_id, self.generation, self.tier, runs, self.pool)


_ExtentBuilder = slot_twin(CacheExtentRef)  # extent_of_runs' plain slot stores


def extent_of_runs(runtime_id: str, generation: int, tier: Tier, runs: Sequence[Run],
                   pool: Kind, count: int | None = None) -> CacheExtentRef:
    """``CacheExtentRef(runtime_id, generation, tier, tuple(PageRun(s, n) for s, n in
    runs), pool)`` of runs its caller knows are valid and coalesced (a pool's
    allocation: ``s >= 0``, ``n >= 1``, none continues the one before it), with
    :meth:`CacheExtentRef.runs`' pairs set from ``runs`` at once: an equal value, built
    without listing them again (a runtime builds one per allocation it places).
    ``count``: the pages of ``runs`` when the caller knows it (the number it allocated:
    :attr:`CacheExtentRef.num_pages` then counts none), else None (counted when asked)."""
    e = _ExtentBuilder()
    e.runtime_id = runtime_id
    e.generation = generation
    e.tier = tier
    e.page_runs = tuple(starmap(page_run, runs))
    e.pool = pool
    e._count = count
    e._runs = tuple(runs)
    e.__class__ = CacheExtentRef  # slot_init.slot_twin: a CacheExtentRef before anyone sees it
    return e


@slot_init
@dataclass(frozen=True, slots=True)
class RequestRuntimeHandle:
    """A request's row in the runtime (its request-to-token table slot)."""

    runtime_id: str
    slot_id: int
    generation: int


def check_generation(
    handle: CacheExtentRef | RequestRuntimeHandle, runtime_id: str, generation: int, what: str
) -> None:
    """Raise :class:`StaleHandleError` unless ``handle`` was issued by this runtime generation."""
    if handle.runtime_id != runtime_id:
        raise StaleHandleError(
            f"{what} belongs to runtime {handle.runtime_id!r}, not {runtime_id!r}"
        )
    if handle.generation != generation:
        raise StaleHandleError(
            f"{what} has generation {handle.generation}, runtime {runtime_id!r} is at "
            f"generation {generation}: the handle is stale"
        )
