"""A request's row: how many device KV pages it holds, their runs in token order, and
how many of them it owns.

Invariant: the row's pages are attached pages + loaded pages + own pages, in token order
(no borrowed page after an own one: checked); ``runs`` always equals coalesce(pages)
(maintained incrementally, per appended run); ``size`` counts the pages and ``owned`` the
own pages (allocated for the request's new tokens, the last ``owned`` pages): only those
may be freed by a Release. Pages are never listed one by one: a row costs per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    PageRun,
    RequestRuntimeHandle,
    Tier,
    page_run,
)
from hicache.runtime.interface import PreparedSlice
from hicache.runtime.page_ids import Run, pages_of, runs_of
from sim.batch import build_extent, build_slice

_FULL, _DEVICE = Kind.FULL, Tier.DEVICE  # hot: Enum reads (ARCHITECTURE.md)


class RequestRow:
    __slots__ = ("handle", "rid", "size", "owned", "runs", "_extent", "_slice")

    def __init__(self, handle: RequestRuntimeHandle, rid: int) -> None:
        self.handle, self.rid = handle, rid
        self.size = 0  # pages held
        self.owned = 0  # own pages: the last ``owned`` of them
        self.runs: list[PageRun] = []
        self._extent: CacheExtentRef | None = None
        self._slice: PreparedSlice | None = None  # for this row's current extent

    @property
    def pages(self) -> list[int]:
        """The page ids held, in token order (listed on demand: tests, messages)."""
        return pages_of((r.first_page, r.page_count) for r in self.runs)

    @property
    def own(self) -> set[int]:
        """The own page ids (listed on demand)."""
        return set(pages_of(self.own_runs()))

    def append(self, pages: Iterable[int], own: bool) -> None:
        """Append ``pages``, page ids in order: :meth:`append_runs` of their runs."""
        self.append_runs(runs_of(pages if isinstance(pages, list) else list(pages)), own)

    def append_runs(self, runs: Sequence[Run], own: bool) -> None:
        """Append the pages of ``runs`` ``(start, length)``, each run a page at least, in
        order (adjacent ones possibly apart: an allocation's)."""
        if not own and runs:
            self._borrow()
        held, n = self.runs, 0
        last = held[-1] if held else None
        # each run joined to the last one if it continues it (``runs`` stays
        # coalesce(pages)); an allocation's runs are pool pages: valid
        for s, k in runs:
            n += k
            if last is not None and last.first_page + last.page_count == s:
                last = held[-1] = page_run(last.first_page, last.page_count + k)
            else:
                last = page_run(s, k)
                held.append(last)
        if n:
            self.size += n
            if own:
                self.owned += n
            self._extent = None

    def append_extent(self, ext: CacheExtentRef) -> None:
        """:meth:`append` of ``ext``'s pages, borrowed (not own), run by run: the same
        rows, without re-deriving the runs ``ext`` already has page by page."""
        if not ext.page_runs:
            return
        if self.owned:
            self._borrow()  # raises
        runs, n = self.runs, 0
        last = runs[-1] if runs else None
        # each run joined to the last one if it continues it, else kept as it is (an
        # extent's runs are frozen values: shared, not copied)
        for r in ext.page_runs:
            k = r.page_count
            n += k
            if last is not None and last.first_page + last.page_count == r.first_page:
                last = runs[-1] = page_run(last.first_page, last.page_count + k)
            else:
                runs.append(r)
                last = r
        self.size += n
        self._extent = None

    def _borrow(self) -> None:
        if self.owned:
            raise ValueError(f"request {self.rid}: borrowed pages after its own ones")

    def own_runs(self) -> list[Run]:
        """``runs_of`` the own pages in token order: ``runs`` less the borrowed pages
        before them, at a cost per run (not per page)."""
        skip = self.size - self.owned
        out: list[Run] = []
        for r in self.runs:
            if skip >= r.page_count:
                skip -= r.page_count
                continue
            out.append((r.first_page + skip, r.page_count - skip))
            skip = 0
        return out

    def extent(self) -> CacheExtentRef:
        if self._extent is None:
            h = self.handle
            self._extent = build_extent(h.runtime_id, h.generation, _DEVICE,
                                        tuple(self.runs), _FULL)
        return self._extent

    def prepared_slice(self) -> PreparedSlice:
        """What a prepare hands back for a slice of this request that loaded nothing and
        keeps no other state: one immutable value per extent, shared while it holds."""
        ps = self._slice
        if ps is not None and ps.kv is self._extent:  # the extent cached is current
            return ps
        ext = self.extent()
        if ps is None or ps.kv is not ext:
            ps = self._slice = build_slice(self.rid, self.handle, ext, ())
        return ps
