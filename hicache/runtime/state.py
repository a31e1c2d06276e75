"""Per-request SWA pages and MAMBA state slots: the runtime's own, per-token bookkeeping.

    swa    one SWA page per KV page of the request, allocated with it; an own page that
           falls more than ``window`` tokens behind the request's end is freed at once,
           unless a checkpoint pinned it (the pages of the window ending at a checkpoint stay
           held until the Release, which may hand them to the tree). Attached SWA pages
           are borrowed from the tree and never freed here.
    mamba  one private state slot per request (first slice to Release); a checkpoint copies
           it into a new slot, the request's own until the Release; an attached checkpoint
           is copied into the private slot (copy-on-write: the cached slot is not written).
           Each copy costs ``mamba_state_bytes`` (all mamba layers) at HBM bandwidth.

Invariant: every page a :class:`StateRow` holds as own is allocated in the runtime's pool,
and a Release frees exactly the own pages and slots it does not keep.

Runtime-side bookkeeping shared by both runtimes (the simulator's free lists and the torch
runtime's fenced allocators satisfy :class:`StatePools`), so they hold the same pages for
the same plans; the torch runtime also moves the data (SWA K/V, MAMBA state copies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hicache.runtime.handles import CacheExtentRef, Kind, Tier, coalesce
from hicache.runtime.interface import RequestSlice


def state_pool_sizes(kinds: Sequence[str], page_size: int, device_tokens: int,
                     swa_tokens: int | None, mamba_slots: int | None,
                     max_running_requests: int) -> dict[Kind, int]:
    """L1 pools of a hybrid model's other components (``scheduler.track_components``),
    as both runtimes size them: ``run.swa_tokens`` (default: cache.device_tokens) in SWA
    pages, and ``run.mamba_slots`` (default: 3 x max_running_requests) MAMBA slots.
    ``kinds``: the model's layer kinds ("full", "swa", "mamba")."""
    out = {}
    if Kind.SWA.value in kinds:
        out[Kind.SWA] = (swa_tokens or device_tokens) // page_size
    if Kind.MAMBA.value in kinds:
        out[Kind.MAMBA] = mamba_slots or 3 * max_running_requests
    return out


def host_state_pool_sizes(device: dict[Kind, int], host_full: int) -> dict[Kind, int]:
    """L2 pools of the state components, with the FULL pool's L2:L1 ratio (SGLang sizes its
    host Mamba and SWA pools by ``hicache_ratio`` too): empty when L2 holds no FULL."""
    full = device.get(Kind.FULL, 0)
    if not host_full or not full:
        return {}
    return {pool: n * host_full // full for pool, n in device.items()
            if pool is not Kind.FULL and n}


def state_loads(attach: Iterable[CacheExtentRef], allocate: Callable[[Kind, int], list[int]],
                runtime_id: str, generation: int
                ) -> tuple[tuple[CacheExtentRef, ...], list[tuple[Kind, list[int], list[int]]],
                           list[CacheExtentRef]]:
    """A first slice's attach with its L2 state extents (SWA pages, a MAMBA
    checkpoint: hybrid load-back) placed on new L1 pages of their pool, in token order:
    (the attach as it reads on L1, the copies (pool, L2 pages, L1 pages), the L1 extents
    those loads landed in, in attach order: they follow the FULL loads in
    ``PreparedSlice.loaded``)."""
    out: list[CacheExtentRef] = []
    copies: list[tuple[Kind, list[int], list[int]]] = []
    landed: list[CacheExtentRef] = []
    for ext in attach:
        if ext.tier is Tier.DEVICE:
            out.append(ext)
            continue
        src = list(ext.pages())
        dst = allocate(ext.pool, len(src))
        copies.append((ext.pool, src, dst))
        dev = CacheExtentRef(runtime_id, generation, Tier.DEVICE, coalesce(dst), ext.pool)
        out.append(dev)
        landed.append(dev)
    return tuple(out), copies, landed


def check_state_attach(attach: Iterable[CacheExtentRef], what: str) -> None:
    """Only state extents (SWA, MAMBA) may be attached from L2 (loaded back)."""
    for ext in attach:
        if ext.tier is Tier.HOST and ext.pool is Kind.FULL:
            raise ValueError(f"{what}: an L2 extent of pool {ext.pool} in attach (FULL "
                             f"pages come back through loads)")
        if ext.tier not in (Tier.DEVICE, Tier.HOST):
            raise ValueError(f"{what}: attach extent on {ext.tier}")


class StatePool(Protocol):
    def allocate(self, n: int) -> list[int]: ...

    def free(self, pages: Sequence[int]) -> None: ...


class StatePools(Protocol):
    """The device pools by component (SWA, MAMBA)."""

    def __getitem__(self, pool: Kind) -> StatePool: ...


@dataclass(slots=True)
class StateRow:
    swa: list[int | None] = field(default_factory=list)  # SWA page per KV page index
    swa_own: set[int] = field(default_factory=set)  # own SWA pages still held
    swa_pinned: set[int] = field(default_factory=set)  # own, held until the Release
    scan: int = 0  # KV page index below which own unpinned SWA pages are already freed
    slot: int | None = None  # private MAMBA state slot
    checkpoints: list[int] = field(default_factory=list)  # own checkpoint slots


class StateKeeper:
    """The SWA/MAMBA side of a runtime's request rows (inactive without those pools)."""

    def __init__(self, device: StatePools, runtime_id: str, generation: int, page_size: int,
                 window: int, mamba: bool, copy_s: float) -> None:
        self.device, self.page = device, page_size
        self.runtime_id, self.generation = runtime_id, generation
        self.window, self.mamba, self.copy_s = window, mamba, copy_s
        self.rows: dict[int, StateRow] = {}

    @property
    def active(self) -> bool:
        return bool(self.window) or self.mamba

    def needs(self, s: RequestSlice, new_pages: int) -> dict[Kind, int]:
        """Pages/slots the slice allocates in each state pool (before any frees)."""
        out: dict[Kind, int] = {}
        if self.window:
            out[Kind.SWA] = new_pages
        if self.mamba:
            out[Kind.MAMBA] = (s.request is None) + s.checkpoint
        return out

    def _ext(self, pages: list[int], pool: Kind) -> CacheExtentRef:
        return CacheExtentRef(self.runtime_id, self.generation, Tier.DEVICE, coalesce(pages),
                              pool)

    def open(self, slot_id: int, attach: Iterable[CacheExtentRef], loaded: int = 0) -> float:
        """New row from the first slice's attach (on L1, state loads placed) and ``loaded``
        FULL pages loaded after it; the SWA pages end where that prefix ends. Returns the
        copy seconds it costs."""
        row = self.rows[slot_id] = StateRow()
        attach = list(attach)
        full = sum(e.num_pages for e in attach if e.pool is Kind.FULL) + loaded
        swa = [p for e in attach if e.pool is Kind.SWA for p in e.pages()]
        if swa and not self.window:
            raise ValueError("attach of 'swa' pages but the runtime keeps no SWA pool")
        if len(swa) > full:
            raise ValueError(f"attach of {len(swa)} SWA pages after {full} KV pages")
        row.swa = [None] * (full - len(swa)) + swa
        row.scan = full
        ckpts = [e for e in attach if e.pool is Kind.MAMBA]
        if ckpts and (not self.mamba or len(ckpts) > 1 or ckpts[0].num_pages != 1):
            raise ValueError("attach may hold one MAMBA checkpoint (1 slot) of a mamba runtime")
        if self.mamba:
            row.slot = self.device[Kind.MAMBA].allocate(1)[0]
        return self.copy_s if ckpts else 0.0

    def advance(self, slot_id: int, s: RequestSlice, kv_pages: int, new: list[int]
                ) -> tuple[tuple[CacheExtentRef, ...], float]:
        """Grow the row by the slice (``new``: the KV pages it allocated, the row then has
        ``kv_pages``); returns (PreparedSlice.state, copy seconds)."""
        row = self.rows[slot_id]
        end = s.context_tokens + s.new_tokens
        state: list[CacheExtentRef] = []
        if self.window:
            row.swa.extend([None] * (kv_pages - len(new) - len(row.swa)))  # loaded pages
            swa = self.device[Kind.SWA].allocate(len(new))
            row.swa.extend(swa)
            row.swa_own.update(swa)
            if s.checkpoint:
                first = max(0, (end - self.window) // self.page)
                for i in range(first, min(len(row.swa), -(-end // self.page))):
                    p = row.swa[i]
                    if p is not None and p in row.swa_own:
                        row.swa_pinned.add(p)
            behind = max(0, (end - self.window) // self.page)  # pages wholly out of window
            for i in range(row.scan, min(behind, len(row.swa))):
                p = row.swa[i]
                if p is not None and p in row.swa_own and p not in row.swa_pinned:
                    self.device[Kind.SWA].free([p])
                    row.swa_own.discard(p)
                    row.swa[i] = None
            row.scan = max(row.scan, behind)
            run: list[int] = []
            for p in reversed(row.swa):
                if p is None:
                    break
                run.append(p)
            if run:
                state.append(self._ext(run[::-1], Kind.SWA))
        seconds = 0.0
        if self.mamba and s.checkpoint:
            if end % self.page:
                raise ValueError(f"request {s.rid}: checkpoint at {end} tokens, not on a page "
                                 "boundary")
            slot = self.device[Kind.MAMBA].allocate(1)[0]
            row.checkpoints.append(slot)
            state.append(self._ext([slot], Kind.MAMBA))
            seconds = self.copy_s
        return tuple(state), seconds

    def check_keep(self, slot_id: int, keep: CacheExtentRef) -> bool:
        """``keep`` (an swa or mamba extent) holds only the row's own pages/slots."""
        row = self.rows.get(slot_id, StateRow())
        own = row.swa_own if keep.pool is Kind.SWA else set(row.checkpoints)
        return keep.pool is not Kind.FULL and set(keep.pages()) <= own

    def _released(self, row: StateRow, keep: Iterable[CacheExtentRef]
                  ) -> dict[Kind, list[int]]:
        kept = {(e.pool, p) for e in keep for p in e.pages()}
        out: dict[Kind, list[int]] = {}
        if self.window:
            out[Kind.SWA] = sorted(p for p in row.swa_own if (Kind.SWA, p) not in kept)
        if self.mamba:
            slots = [p for p in row.checkpoints if (Kind.MAMBA, p) not in kept]
            out[Kind.MAMBA] = ([row.slot] if row.slot is not None else []) + slots
        return out

    def releasable(self, slot_id: int, keep: Iterable[CacheExtentRef]) -> dict[Kind, int]:
        """Pages/slots per state pool a Release of ``slot_id`` keeping ``keep`` would free."""
        row = self.rows.get(slot_id)
        if row is None:
            return {}
        return {pool: len(pages) for pool, pages in self._released(row, keep).items()}

    def release(self, slot_id: int, keep: Iterable[CacheExtentRef]) -> None:
        row = self.rows.pop(slot_id, None)
        if row is None:
            return
        for pool, pages in self._released(row, keep).items():
            self.device[pool].free(pages)
