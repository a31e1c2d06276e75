"""A request's row: its device KV pages in token order and which of them it owns.

Invariant: ``pages`` = attached pages + loaded pages + own pages, in token order (no
borrowed page after an own one: checked); ``runs`` always equals coalesce(pages)
(maintained incrementally, O(1) per appended page); only ``own`` pages (allocated for the
request's new tokens) may be freed by a Release: they are the last ``len(own)`` pages.
"""

from __future__ import annotations

from collections.abc import Iterable

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    PageRun,
    RequestRuntimeHandle,
    Tier,
    page_run,
)
from hicache.runtime.interface import PreparedSlice
from hicache.runtime.page_ids import Run, runs_of


class RequestRow:
    __slots__ = ("handle", "rid", "pages", "runs", "own", "_extent", "_slice")

    def __init__(self, handle: RequestRuntimeHandle, rid: int) -> None:
        self.handle, self.rid = handle, rid
        self.pages: list[int] = []
        self.runs: list[PageRun] = []
        self.own: set[int] = set()
        self._extent: CacheExtentRef | None = None
        self._slice: PreparedSlice | None = None  # for this row's current extent

    def append(self, pages: Iterable[int], own: bool, runs: Iterable[Run] | None = None
               ) -> None:
        """Append ``pages`` (``runs``: their runs in order, adjacent ones possibly apart,
        when the caller has them: an allocation's)."""
        pages = pages if isinstance(pages, list) else list(pages)
        if not pages:
            return
        if not own:
            self._borrow()
        self.pages.extend(pages)
        if own:
            self.own.update(pages)
        for s, n in runs_of(pages) if runs is None else runs:
            self._join(s, n)
        self._extent = None

    def append_extent(self, ext: CacheExtentRef) -> None:
        """:meth:`append` of ``ext``'s pages, borrowed (not own), run by run: the same
        rows, without re-deriving the runs ``ext`` already has page by page."""
        if not ext.page_runs:
            return
        self._borrow()
        for r in ext.page_runs:
            self.pages.extend(r.pages())
            self._join(r.first_page, r.page_count, r)
        self._extent = None

    def _join(self, start: int, n: int, run: PageRun | None = None) -> None:
        """Add the run ``start, n`` (of pool pages: valid) to ``runs``, joined to the last
        one if it continues it (so ``runs`` stays coalesce(pages)); ``run``: that run as a
        value already (an extent's, frozen: kept, not copied, when it stands alone)."""
        runs = self.runs
        last = runs[-1] if runs else None
        if last is not None and last.first_page + last.page_count == start:
            runs[-1] = page_run(last.first_page, last.page_count + n)
        else:
            runs.append(run if run is not None else page_run(start, n))

    def _borrow(self) -> None:
        if self.own:
            raise ValueError(f"request {self.rid}: borrowed pages after its own ones")

    def own_runs(self) -> list[Run]:
        """``runs_of`` the own pages in token order: ``runs`` less the borrowed pages
        before them, at a cost per run (not per page)."""
        skip = len(self.pages) - len(self.own)
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
            self._extent = CacheExtentRef(h.runtime_id, h.generation, Tier.DEVICE,
                                          tuple(self.runs), Kind.FULL)
        return self._extent

    def prepared_slice(self) -> PreparedSlice:
        """What a prepare hands back for a slice of this request that loaded nothing and
        keeps no other state: one immutable value per extent, shared while it holds."""
        ps = self._slice
        if ps is not None and ps.kv is self._extent:  # the extent cached is current
            return ps
        ext = self.extent()
        if ps is None or ps.kv is not ext:
            ps = self._slice = PreparedSlice(self.rid, self.handle, ext, ())
        return ps
