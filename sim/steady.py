"""The steady decode batch: the requests of the batch before, in the same order.

A scheduler's decode plans repeat their request set batch after batch: a request that
finished drops out, one whose prefill ended joins at the end. Each decode slice is
checked and placed alike, so what the last prepare found is kept here
(:class:`SteadyRows`: the rows, the tokens their pages hold, the prepared slices), and a
plan whose first slices are one-token decodes of those very rows, in their order,
loading nothing, is checked against it with a few reads per slice (no row looked up, no
page count derived) and placed touching only the rows whose context reached their last
page (the others hand back the prepared slice of last time). Rows whose request is not
in the plan are skipped (a request a fold finished leaves the plans before its release:
the rows matched are then kept as rows of their own). Slices after those (requests that
joined) are checked and placed one by one, as any plan's. Pages placed outside a prepare
(a fold's, for its steps) move the pool's ``takes``: the next match reads the page
counts and prepared slices off the rows again (:meth:`SteadyRows.refresh`) first.

Invariant (what makes a match exact): a :class:`SteadyRows` held by the runtime
(``Memory.steady``) with ``takes`` equal to its pool's describes open rows as they
are now: every row it lists is open, and holds ``caps[i] // page_size`` pages. Rows
grow only by device FULL allocations (:attr:`sim.pools.PagePool.takes` counts them; a
prepare that allocates only for new rows moves the count on, see :func:`after_prepare`)
and close only by a release or a restart (the runtime drops it when a release closes
one of its rows, and on restart). So a slice that names the very handle a listed row
holds, with its rid, no attach or loads, passes every per-slice check of
:func:`sim.validate.check_plan`, and its new pages are those the general path gives: a
one-token decode at context ``c`` of a row holding ``cap`` tokens' pages needs one new
page iff ``c == cap``, none if ``c < cap``; anything else (``c > cap``, another shape,
handle or order) is left to the general path (so every error is raised there, the
same way).
"""

from __future__ import annotations

from itertools import compress
from operator import eq
from typing import TYPE_CHECKING

from hicache.runtime.interface import BatchPlan, Phase, PreparedSlice, RequestSlice
from sim.pools import PagePool
from sim.rows import RequestRow

if TYPE_CHECKING:
    from sim.validate import Checked

_DECODE = Phase.DECODE


class SteadyRows:
    """The rows of a placed plan's later slices, in its slice order (module doc), at
    least one; ``prepared``: what the prepare handed back for them; ``page``: the page
    size (a row holding ``k`` pages holds ``k * page`` tokens' KV). Matching reads each
    slice's fields in a plain loop: the interpreter's specialised slot reads cost less
    than ``operator.attrgetter`` (a generic attribute lookup each)."""

    __slots__ = ("rows", "caps", "prepared", "pool", "takes", "zeros", "missed", "page")

    def __init__(self, rows: list[RequestRow], caps: list[int],
                 prepared: tuple[PreparedSlice, ...], pool: PagePool, page: int) -> None:
        self.rows, self.caps, self.prepared = rows, caps, prepared
        self.pool, self.takes, self.page = pool, pool.takes, page
        self.zeros = [0] * len(rows)  # the new pages of a plan that needs none (shared)
        self.missed: tuple[RequestSlice, ...] = ()  # the slices that last failed to match

    def current(self) -> bool:
        """No device FULL page was placed since: the rows hold what ``caps`` says."""
        return self.pool.takes == self.takes

    def refresh(self) -> None:
        """Pages were placed since (a fold's pages of its steps, or a prepare's for new
        rows): read ``caps`` and ``prepared`` off the rows again, as they are now (the
        rows are open: a release or restart drops them all)."""
        page = self.page
        self.caps = [row.size * page for row in self.rows]
        self.prepared = tuple([row.prepared_slice() for row in self.rows])
        self.takes = self.pool.takes

    def match(self, slices: tuple[RequestSlice, ...]
              ) -> tuple[SteadyRows, list[int], list[int]] | None:
        """(the rows matched, their slices' contexts, their new pages) for the longest
        run of first slices of ``slices`` that are each a one-token decode, loading
        nothing, of a row (the very handle the row holds, its rid) whose context fits
        the pages the row holds (or reaches their end), the rows in their order here;
        else None (the general check decides, and raises where it should). The rows
        matched are these (``self``) when the first slices name every row in order,
        else the ones they name (rows of requests that left the plan, unreleased, are
        skipped: a fold's finished ones). A handle equal to a row's but not the very
        one it holds is left to the general check."""
        if slices is self.missed or slices[0].request is None:  # (a first slice: no row)
            return None
        if self.pool.takes != self.takes:
            self.refresh()
        rows = self.rows
        if len(slices) < len(rows):
            return self._skipping(slices)
        contexts: list[int] = []
        add = contexts.append
        full = False  # some context reached its row's last page
        for s, row, cap in zip(slices, rows, self.caps, strict=False):  # the first m
            c = s.context_tokens
            if s.request is not row.handle:
                return self._skipping(slices)
            if (s.rid != row.rid or s.phase is not _DECODE or s.new_tokens != 1
                    or s.attach or s.loads or c > cap):
                self.missed = slices  # (prepare_batch may ask twice: once is enough)
                return None
            if c == cap:
                full = True
            add(c)
        return self, contexts, list(map(eq, contexts, self.caps)) if full else self.zeros

    def _skipping(self, slices: tuple[RequestSlice, ...]
                  ) -> tuple[SteadyRows, list[int], list[int]] | None:
        """:meth:`match` where the slices skip rows: the first slices that name rows in
        their order (each as :meth:`match` asks), up to the first that does not; the
        rows they name as rows of their own."""
        rows, caps = self.rows, self.caps
        m, j = len(rows), 0
        picked: list[int] = []
        contexts: list[int] = []
        for s in slices:
            h = s.request
            while j < m and rows[j].handle is not h:
                j += 1
            if j == m:
                break
            row, c = rows[j], s.context_tokens
            if (s.rid != row.rid or s.phase is not _DECODE or s.new_tokens != 1
                    or s.attach or s.loads or c > caps[j]):
                break
            picked.append(j)
            contexts.append(c)
            j += 1
        if not picked:
            self.missed = slices
            return None
        prepared = self.prepared
        sub = SteadyRows([rows[i] for i in picked], [caps[i] for i in picked],
                         tuple([prepared[i] for i in picked]), self.pool, self.page)
        full = any(map(eq, contexts, sub.caps))
        return sub, contexts, list(map(eq, contexts, sub.caps)) if full else sub.zeros


def place(sd: SteadyRows, new: list[int], page_size: int) -> tuple[PreparedSlice, ...]:
    """Place the matched slices (``new``: their new pages first, as in
    :attr:`sim.validate.Checked.new`): one new page for each row that needs one, in
    slice order (the general path's allocations, in its order); return their prepared
    slices, the last ones for every row that did not change."""
    if new is sd.zeros:
        return sd.prepared
    out = list(sd.prepared)
    rows, caps, allocate = sd.rows, sd.caps, sd.pool.allocate_runs
    for i in compress(range(len(out)), new):
        row = rows[i]
        row.append_runs(allocate(1), own=True)
        caps[i] += page_size
        out[i] = row.prepared_slice()
    sd.prepared = prepared = tuple(out)
    sd.takes = sd.pool.takes
    return prepared


def after_prepare(last: SteadyRows | None, head: SteadyRows | None, plan: BatchPlan,
                  checked: Checked, prepared: tuple[PreparedSlice, ...],
                  finished: tuple[int, ...], pool: PagePool, page_size: int
                  ) -> SteadyRows | None:
    """What the next plan may match after ``plan`` (with slices) was placed: ``last``
    (current when the prepare began, or None) when every slice was a first one (new
    rows only: those of ``last`` are as they were); else the plan's rows if no slice
    was a first one (``head``: the rows its first slices matched, placed: only the
    rows after them are read); else None. Rows whose request ``plan`` finishes
    (``finished``: their rids) are left out (the next plan has no slice of them)."""
    slices = plan.slices
    if checked.firsts == len(slices):
        if last is not None:
            last.takes = pool.takes
        return last
    if checked.firsts:
        return None
    rows: list[RequestRow] = checked.rows  # type: ignore[assignment]  # no first slice
    m = len(head.rows) if head is not None else 0
    caps = [r.size * page_size for r in (rows[m:] if m else rows)]
    if head is not None:
        caps = head.caps + caps
    return without_finished(SteadyRows(rows, caps, prepared, pool, page_size), slices,
                            finished)


def without_finished(sd: SteadyRows, slices: tuple[RequestSlice, ...],
                     finished: tuple[int, ...]) -> SteadyRows | None:
    """``sd`` (the rows of ``slices``, placed) less the rows whose request ``slices``
    finish (``finished``: their rids): the next plan has no slice of them (a finished
    request decodes no more); None when every one finishes (no rows: nothing to match)."""
    if not finished:
        return sd
    keep = [not s.finishes for s in slices]
    if not any(keep):
        return None
    return SteadyRows(list(compress(sd.rows, keep)), list(compress(sd.caps, keep)),
                      tuple(compress(sd.prepared, keep)), sd.pool, sd.page)
