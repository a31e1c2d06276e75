"""Plan validation: stale handles, misplaced extents, double frees and capacity, all
checked before a prepare changes anything (prepare is atomic).

Invariant: a plan that passes :func:`check_plan` and :func:`check_capacity` can be placed
without an allocation failing: capacity counts what the plan's frees and releases return
(they apply first). Cost: proportional to the plan (its slices, intents and page *runs*),
never to the pools; messages are built only when a check fails. What the checks find per
slice (the open row of a later slice, the new pages each slice needs, how many slices are
first ones) comes back in :class:`Checked`, so prepare places the plan without looking it
up again: frees and releases change neither (a plan never both releases and continues a
request). A release that keeps the request's first own pages, in order (the prompt's
pages the cache took), frees the rest of its own runs: no per-page check is needed.
With ``give_checks`` (pools that hand out the lowest page first) whether each freed page
is allocated and freed once is checked as the prepare frees it
(:meth:`sim.pools.PagePool.give_checked`, one pass over the runs), before
:func:`check_capacity`; a refusal of either leaves every pool as it was, and names the
culprit as the check made here would have (:func:`refuse_frees`).
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    RequestRuntimeHandle,
    StaleHandleError,
    Tier,
    check_generation,
)
from hicache.runtime.interface import BatchPlan, CapacityError, Release, RequestSlice
from hicache.runtime.page_ids import Run, runs_minus
from sim.rows import RequestRow
from sim.steady import SteadyRows

if TYPE_CHECKING:
    from sim.memory import Memory


_FULL, _DEVICE, _HOST = Kind.FULL, Tier.DEVICE, Tier.HOST  # hot: Enum reads (ARCHITECTURE.md)

Released = dict[int, list[Run]]  # request slot -> runs of the L1 pages its release frees
Freed = dict[tuple[Tier, Kind], list[Run]]  # (tier, pool) -> runs a plan's frees return
_NO_FREES: Freed = {}  # a plan that frees nothing (shared: never written)


class Checked(NamedTuple):
    """What :func:`check_plan` found, per slice in plan order and per release."""

    released: Released
    rows: list[RequestRow | None]  # a later slice's open row; None for a first slice
    new: list[int]  # new FULL pages the slice's tokens need beyond those it holds
    firsts: int  # first slices (rows None): the only ones that load or attach
    # the runs of the plan's frees by (tier, pool), each pool's in plan order (the
    # extents' runs one after another): what the prepare frees, checked once here; with
    # ``give_checks`` (check_plan) the releases' runs after L1 FULL's, all left to
    # PagePool.give_checked to check as they are freed
    frees: Freed
    # a steady plan (sim.steady: its first slices repeat rows placed before, in order):
    # those rows, and those slices' contexts (their decodes); None for a plan whose
    # slices were all checked one by one
    steady: SteadyRows | None = None
    contexts: list[int] | None = None


def check_ext(mem: Memory, ext: CacheExtentRef, tier: Tier, what: str) -> None:
    check_generation(ext, mem.runtime_id, mem.generation, what)
    if ext.tier is not tier:
        raise ValueError(f"{what} must be on {tier}, got {ext.tier}")


def _current(mem: Memory, ext: CacheExtentRef, tier: Tier) -> bool:
    return ext.tier is tier and ext.generation == mem.generation and \
        ext.runtime_id == mem.runtime_id


def row_of(mem: Memory, handle: RequestRuntimeHandle, what: str) -> RequestRow:
    check_generation(handle, mem.runtime_id, mem.generation, what)
    row = mem.rows.get(handle.slot_id)
    if row is None or row.handle != handle:
        raise StaleHandleError(f"{what}: request slot {handle.slot_id} is not open (the "
                               "handle outlived its release)")
    return row


def _open_row(mem: Memory, handle: RequestRuntimeHandle, what: str) -> RequestRow:
    """:func:`row_of`, with the common case (the very handle the runtime issued) first."""
    row = mem.rows.get(handle.slot_id)
    if row is not None and row.handle is handle and handle.generation == mem.generation:
        return row
    return row_of(mem, handle, what)


def check_plan(mem: Memory, plan: BatchPlan, l3: bool, give_checks: bool = False
               ) -> Checked:
    """Reject stale or misplaced handles and slices whose context their pages do not
    hold, before anything changes; return what each release will free (prepare frees
    exactly that) and each slice's row and new pages (:class:`Checked`). ``give_checks``:
    the caller frees the pages with :meth:`sim.pools.PagePool.give_checked` next, which
    checks that each is allocated and listed once as it frees it (and frees none when one
    is not): that check is left to it (:attr:`Checked.frees` then lists the releases'
    pages too), and the rest of the frees' checks are made here."""
    slices = plan.slices
    sd = mem.steady
    matched = sd.match(slices) if sd is not None and slices else None
    if matched is not None:  # its first slices repeat rows, as checked then: sd's now
        sd, contexts, new = matched
        slice_rows: list[RequestRow | None] = sd.rows  # type: ignore[assignment]
        firsts = 0
        if len(new) < len(slices):  # requests that joined: checked one by one
            if len({s.rid for s in slices}) != len(slices):
                matched = None  # the general check names the slice
            else:
                more_rows, more_new, firsts = _check_slices(mem, slices[len(new):],
                                                            plan.batch_id)
                slice_rows, new = slice_rows + more_rows, new + more_new
    if matched is None:
        slice_rows, new, firsts = _check_slices(mem, slices, plan.batch_id)
        sd = contexts = None
    for b in plan.backups:
        if not _current(mem, b.src, _DEVICE):
            check_ext(mem, b.src, _DEVICE, f"backup job {b.job_id}")
    for st in plan.stores:
        if not _current(mem, st.src, _HOST):
            check_ext(mem, st.src, _HOST, f"store job {st.job_id}")
        if len(st.keys) != st.src.num_pages:
            raise ValueError(f"store job {st.job_id}: {len(st.keys)} keys for "
                             f"{st.src.num_pages} pages")
    if (plan.stores or plan.prefetches) and not l3:
        raise ValueError("store/prefetch intents need an L3 (SimRuntime(l3=...))")
    for ext in plan.frees:
        check_generation(ext, mem.runtime_id, mem.generation, "freed extent")
    released: Released = {}
    if plan.releases:
        slots = {rel.request.slot_id for rel in plan.releases}
        if len(slots) != len(plan.releases):
            raise ValueError(f"batch {plan.batch_id} releases a request twice")
        # a matched slice names its row's very handle, and the rows are open: a release
        # of a row they list is one of a matched slice's request (found by identity)
        later = plan.slices if sd is None else plan.slices[len(sd.rows):]
        if (sd is not None and any([mem.rows.get(slot) in sd.rows for slot in slots])) or any(
                [s.request is not None and s.request.slot_id in slots for s in later]):
            raise ValueError(f"batch {plan.batch_id} both releases and continues a request")
        for rel in plan.releases:
            released[rel.request.slot_id] = _check_release(mem, rel)
    frees = (_check_frees(mem, plan, released, give_checks) if plan.frees or released
             else _NO_FREES)
    return Checked(released, slice_rows, new, firsts, frees, sd, contexts)


def _check_slices(mem: Memory, slices: tuple[RequestSlice, ...], batch_id: int
                  ) -> tuple[list[RequestRow | None], list[int], int]:
    """:func:`check_plan`'s checks of ``slices``, one by one: (each slice's open row or
    None, its new pages, how many are first slices)."""
    rows, page = mem.rows, mem.page_size
    slice_rows: list[RequestRow | None] = []
    new: list[int] = []
    add_row, add_new = slice_rows.append, new.append
    firsts = 0
    if len({s.rid for s in slices}) != len(slices):
        _twice(slices, batch_id)
    for s in slices:
        h = s.request
        if h is not None:
            # the very handle of an open row is current: rows hold their generation's
            # handles only (restart empties them)
            row = rows.get(h.slot_id)
            if row is None or row.handle is not h:
                row = row_of(mem, h, f"request {s.rid}")  # the full check (raises if stale)
            if row.rid != s.rid:
                raise ValueError(f"request {s.rid}: its handle is request {row.rid}'s")
            if s.attach or s.loads:
                raise ValueError(f"request {s.rid}: attach/loads only on its first slice")
            add_row(row)
            existing, ctx = row.size, s.context_tokens  # new_pages, in line
            if ctx > existing * page:
                new_pages(mem, s, existing)  # raises
            n = -(-(ctx + s.new_tokens) // page) - existing
            add_new(n if n > 0 else 0)
            continue  # a later slice: nothing more to check
        firsts += 1
        for ext in s.attach:  # state pieces may come from L2 (hybrid load-back)
            tier = _HOST if ext.tier is _HOST and ext.pool is not _FULL else _DEVICE
            if not _current(mem, ext, tier):
                check_ext(mem, ext, tier, f"attach of request {s.rid}")
            if ext.pool is not _FULL and not mem.state_active:
                raise ValueError(f"attach of request {s.rid}: pool '{ext.pool}' is not kept "
                                 "by this runtime")
        for load in s.loads:
            if not _current(mem, load.src, _HOST):
                check_ext(mem, load.src, _HOST, f"load of request {s.rid}")
        slice_rows.append(None)
        new.append(new_pages(mem, s, sum(
            e.num_pages for e in s.attach if e.pool is _FULL) + sum(
            ld.src.num_pages for ld in s.loads if ld.src.pool is _FULL)))
    return slice_rows, new, firsts


def _twice(slices: tuple[RequestSlice, ...], batch_id: int) -> None:
    """Raise for the first slice whose request an earlier slice has (there is one)."""
    seen: set[int] = set()
    for s in slices:
        if s.rid in seen:
            raise ValueError(f"request {s.rid} appears twice in batch {batch_id}")
        seen.add(s.rid)


def _check_release(mem: Memory, rel: Release) -> list[Run]:
    """Check what ``rel`` keeps; return the runs of the request's own pages it frees."""
    row = _open_row(mem, rel.request, "release")
    kept = rel.kept()
    own = row.own_runs()
    keep: list[Run] = [(r.first_page, r.page_count)  # the FULL pages kept, as runs
                       for ext in kept if ext.pool is _FULL for r in ext.page_runs]
    # the common keep (the prompt's pages the tree took): the first own pages, in order;
    # then they are own pages, and the rest of ``own`` is what runs_minus would give
    rest = _after_prefix(own, keep)
    for ext in kept:
        if not _current(mem, ext, _DEVICE):
            check_ext(mem, ext, _DEVICE, "release keep")
        if ext.pool is _FULL:
            ok = rest is not None or not runs_minus(ext.runs(), own)
        else:
            ok = mem.state.check_keep(rel.request.slot_id, ext)
        if not ok:
            raise ValueError(f"release of request {row.rid}: keep holds pages the "
                             "request did not allocate")
    if rest is not None:
        return rest
    return runs_minus(own, keep) if keep else own


def _after_prefix(own: list[Run], keep: list[Run]) -> list[Run] | None:
    """The runs of ``own`` (coalesced, as :meth:`RequestRow.own_runs` gives them) after
    its first pages when ``keep`` holds exactly those pages, in order; else None. Then
    every kept page is an own page, and the result is ``runs_minus(own, keep)``: the
    rest of a coalesced list of runs, its first run maybe cut, is coalesced."""
    i, cut = 0, 0  # own[i] from page ``cut`` of it on is not kept (yet)
    for start, left in keep:
        while left:
            if i == len(own):
                return None
            s, n = own[i]
            if s + cut != start:
                return None
            take = min(left, n - cut)
            start, left, cut = start + take, left - take, cut + take
            if cut == n:
                i, cut = i + 1, 0
    if i == len(own):
        return []
    s, n = own[i]
    return [(s + cut, n - cut), *own[i + 1:]] if cut else own[i:]


def _check_frees(mem: Memory, plan: BatchPlan, released: Released,
                 give_checks: bool = False) -> Freed:
    """Every page the plan frees is allocated and freed once (frees and releases), and
    none is read by the plan's own backups or stores; return the frees' runs by pool
    (:attr:`Checked.frees`). Works on runs: per pool one :meth:`PagePool.bad_runs` and,
    where the plan's backups or stores read that pool, one walk of both sorted runs
    (:func:`_meet`); only a plan that fails one is walked again by
    :func:`_explain_frees`, which names the culprit (and raises in the same order).
    ``give_checks``: no :meth:`PagePool.bad_runs` (the caller's ``give_checked`` checks
    the same, :func:`check_plan`); return every pool's runs, the releases' with them."""
    frees: Freed = {}
    for e in plan.frees:
        key = (e.tier, e.pool)
        runs = frees.get(key)
        if runs is None:
            runs = frees[key] = []
        runs += e.runs()
    device_full = (_DEVICE, _FULL)
    if released:  # the releases' runs join L1 FULL's, after its frees (the check's order)
        extra = [run for rel in plan.releases for run in released[rel.request.slot_id]]
        checks = dict(frees)
        checks[device_full] = [*frees.get(device_full, ()), *extra]
    else:
        checks = frees
    reads: dict[tuple[Tier, Kind], list[Run]] | None = None
    if plan.backups or plan.stores:  # the runs they read, by pool (a few extents)
        reads = {}
        for ext in [b.src for b in plan.backups] + [st.src for st in plan.stores]:
            key = (ext.tier, ext.pool)
            got = reads.get(key)
            if got is None:
                got = reads[key] = []
            got += ext.runs()
    for key, runs in checks.items():
        if not runs:
            continue
        pool = mem.tier(key[0])[key[1]]  # (raises for a tier or pool the runtime lacks)
        if (not give_checks and pool.bad_runs(runs) is not None) or (
                reads is not None and key in reads and _meet(runs, reads[key])):
            _explain_frees(mem, plan, released)  # raises: it runs the same checks first
    return checks if give_checks else frees


def refuse_frees(mem: Memory, plan: BatchPlan, released: Released) -> None:
    """:func:`_check_frees`' checks of a plan whose frees a ``give_checked`` refused: raise
    naming the culprit, as :func:`check_plan` without ``give_checks`` would have."""
    _check_frees(mem, plan, released)


def _meet(runs: list[Run], other: list[Run]) -> bool:
    """Whether a page of ``runs`` (pairwise disjoint) is one of ``other`` (any runs):
    both sorted, walked once side by side."""
    a, b = sorted(runs), sorted(other)
    i = j = 0
    while i < len(a) and j < len(b):
        s, n = a[i]
        t, m = b[j]
        if s + n <= t:  # a[i] ends before b[j] (and every later b) starts
            i += 1
        elif t + m <= s:  # b[j] ends before a[i] (and every later a) starts
            j += 1
        else:
            return True
    return False


def _explain_frees(mem: Memory, plan: BatchPlan, released: Released) -> None:
    """:func:`_check_frees`'s checks page run by page run, each with its source: raise
    for the first page of a pool that is not allocated, read by the plan's own backups or
    stores, or freed twice."""
    freed: dict[tuple[Tier, Kind], list[tuple[int, int, int]]] = {}  # (start, n, source)
    for i, e in enumerate(plan.frees):
        spans = freed.setdefault((e.tier, e.pool), [])
        spans.extend((r.first_page, r.page_count, i) for r in e.page_runs)
    if released:
        spans = freed.setdefault((_DEVICE, _FULL), [])
        for j, rel in enumerate(plan.releases):
            spans.extend((s, n, ~j) for s, n in released[rel.request.slot_id])
    if not freed:
        return

    def what(source: int) -> str:
        if source >= 0:
            return f"free of {plan.frees[source].num_pages} pages"
        return f"release of request {mem.rows[plan.releases[~source].request.slot_id].rid}"

    reads: dict[tuple[Tier, Kind], list[tuple[int, int]]] = {}
    for ext in [b.src for b in plan.backups] + [s.src for s in plan.stores]:
        reads.setdefault((ext.tier, ext.pool), []).extend(ext.runs())
    for (tier, pool), spans in freed.items():
        pages_pool = mem.tier(tier)[pool]
        # one pass over the runs finds whether any page is unallocated or freed twice; only
        # then are they walked again below, for the message that names the culprit
        clean = pages_pool.bad_runs([(s, n) for s, n, _ in spans]) is None
        for s, n, source in () if clean else spans:
            p = pages_pool.unallocated_in(s, n)
            if p is not None:
                raise ValueError(f"{what(source)}: {tier.value} page {p} of pool '{pool}' is "
                                 "not allocated (freed before?)")
        read = reads.get((tier, pool))
        if read:
            hit = _overlap(spans, read)
            if hit is not None:
                p, source = hit
                raise ValueError(f"{what(source)}: plan frees {tier.value} page {p} that its "
                                 "own backups or stores read")
        if len(spans) > 1 and not clean:
            ordered = sorted(spans)
            for (s0, n0, _), (s1, _, source) in zip(ordered, ordered[1:], strict=False):
                if s1 < s0 + n0:
                    raise ValueError(f"{what(source)}: {tier.value} page {s1} of pool "
                                     f"'{pool}' is freed twice in batch {plan.batch_id}")


def _overlap(spans: list[tuple[int, int, int]], read: list[tuple[int, int]]
             ) -> tuple[int, int] | None:
    """(first page, source) of a freed span that a read span overlaps, else None."""
    ordered = sorted(read)
    for s, n, source in spans:
        for rs, rn in ordered:
            if rs >= s + n:
                break
            if rs + rn > s:
                return max(s, rs), source
    return None


def new_pages(mem: Memory, s: RequestSlice, existing: int) -> int:
    if s.context_tokens > existing * mem.page_size:
        raise ValueError(f"request {s.rid}: context {s.context_tokens} tokens but only "
                         f"{existing} pages of {mem.page_size} hold KV")
    total = -(-(s.context_tokens + s.new_tokens) // mem.page_size)
    return max(0, total - existing)


def check_capacity(mem: Memory, plan: BatchPlan, checked: Checked, given: bool = False
                   ) -> None:
    """Refuse a plan that needs more pages of a pool than it has free once the plan's
    frees and releases returned theirs (they apply first). ``given``: those frees and the
    releases' L1 FULL pages are back in their pools already (``give_checked``), so the
    free counts hold them: the same sums and messages."""
    state = mem.state_active
    if not (state or checked.firsts or plan.backups or plan.prefetches):
        # later slices only, no copy into L2: they allocate new FULL pages alone, and the
        # plan's frees and releases return pages first (counted only when the pool's free
        # pages fall short: the check below, for that one pool)
        n = sum(checked.new)
        if n and n > mem.full.free_count:
            _short_full(mem, plan, checked, n, given)
        return
    need_device: dict[Kind, int] = {_FULL: sum(checked.new)}
    need_host: dict[Kind, int] = {}
    released = checked.released
    # without state pools only first slices need more than their new FULL pages, and
    # the slices a steady match took are later ones (none of them with state pools)
    h = len(checked.contexts) if checked.contexts is not None else 0
    slices = plan.slices if not h else plan.slices[h:]
    for s, row, new in (zip(slices, checked.rows[h:] if h else checked.rows,
                            checked.new[h:] if h else checked.new, strict=True)
                        if state or checked.firsts else ()):
        if state:
            for pool, n in mem.state.needs(s, new).items():
                need_device[pool] = need_device.get(pool, 0) + n
        if row is not None:
            continue  # a later slice loads and attaches nothing (check_plan)
        for ld in s.loads:
            need_device[ld.src.pool] = need_device.get(ld.src.pool, 0) + ld.src.num_pages
        for ext in s.attach:
            if ext.tier is _HOST:  # hybrid load-back: L2 state lands in L1
                need_device[ext.pool] = need_device.get(ext.pool, 0) + ext.num_pages
    for b in plan.backups:
        need_host[b.src.pool] = need_host.get(b.src.pool, 0) + b.src.num_pages
    for pf in plan.prefetches:
        need_host[_FULL] = need_host.get(_FULL, 0) + pf.max_pages
    back: dict[tuple[Tier, Kind], int] = {}  # what the frees and releases return first
    for ext in () if given else plan.frees:
        key = (ext.tier, ext.pool)
        back[key] = back.get(key, 0) + ext.num_pages
    for rel in plan.releases:
        if not given:
            key = (_DEVICE, _FULL)
            back[key] = back.get(key, 0) + sum(map(itemgetter(1),
                                                   released[rel.request.slot_id]))
        if state:
            for pool, n in mem.state.releasable(rel.request.slot_id, rel.kept()).items():
                back[(_DEVICE, pool)] = back.get((_DEVICE, pool), 0) + n
    for tier, need in ((_DEVICE, need_device), (_HOST, need_host)):
        for pool, n in need.items():
            if not n:
                continue
            free = mem.tier(tier)[pool].free_count + back.get((tier, pool), 0)
            if n > free:
                raise CapacityError(f"batch {plan.batch_id} needs {n} {tier.value} pages of "
                                    f"pool '{pool}', {free} free (not accounted for)")


def _short_full(mem: Memory, plan: BatchPlan, checked: Checked, n: int,
                given: bool = False) -> None:
    """:func:`check_capacity` of a plan that needs ``n`` new L1 FULL pages and nothing
    else, more than the pool has free: raise unless its frees and releases return
    enough (the same sum and message as the general check; ``given``: they did)."""
    if given:
        raise CapacityError(f"batch {plan.batch_id} needs {n} {_DEVICE.value} pages of "
                            f"pool '{_FULL}', {mem.full.free_count} free (not accounted for)")
    back = sum(ext.num_pages for ext in plan.frees
               if ext.tier == _DEVICE and ext.pool == _FULL)
    for rel in plan.releases:
        back += sum(k for _, k in checked.released[rel.request.slot_id])
    free = mem.full.free_count + back
    if n > free:
        raise CapacityError(f"batch {plan.batch_id} needs {n} {_DEVICE.value} pages of "
                            f"pool '{_FULL}', {free} free (not accounted for)")
