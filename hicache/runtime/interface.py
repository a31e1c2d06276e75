"""The RuntimeInterface: the one boundary between cache control and GPU execution.

Two calls per batch cross it (seed 000)::

    control (scheduler, tree, policies)          runtime (allocator, req->token table,
                                                          streams, copy engines, L3 I/O)
    plan N+1 ----- prepare_batch(plan) ------->  allocate pages, start H2D loads early
            <----- PreparedBatchHandle --------  request handles + extents (no addresses)
            ------ execute_batch(handle) ----->  compute waits per layer on load events,
                                                 D2H backup after an event on compute
            <----- BatchCompletion / TransferCompletion (asynchronously, via poll)

Invariants, checked by tests:
- Nothing crosses per token: a plan names requests, token *counts* and extents; the
  runtime appends decode tokens, writes its request-to-token table and frees pages itself.
- The control side never holds a stream, event, pointer or physical page index; it holds
  :mod:`handles` with generations and states *intents* (load, backup, prefetch, store,
  free). Which stream, which event, when compute waits: the runtime decides (it owns overlap).
- Capacity is *accounted* on the control side (page counts per tier, see
  :class:`RuntimeInfo`), *placed* on the runtime side; an allocation the control side did
  not account for is a contract violation and raises :class:`CapacityError`.
- Ready to cross a process boundary: every message is a frozen value; handles and extents
  are compared by value, never by identity; waiting is part of the interface
  (:meth:`RuntimeInterface.wait`), so a driver needs nothing runtime-specific.

The contract every runtime passes (``tests/contract/``):
- ``prepare_batch`` is atomic: it raises (``StaleHandleError`` for a handle of another
  runtime or generation, or a request row already closed; ``CapacityError`` when a pool
  cannot hold the plan; ``ValueError`` for a malformed plan) and changes nothing, or it
  places the whole plan. Frees and releases apply before the plan's allocations.
- Each page is freed exactly once: freeing a page that is not allocated raises.
- Completions: a batch's BatchCompletion comes after those of every batch executed before
  it; a backup's TransferCompletion after its batch's BatchCompletion; ``end`` times never
  decrease along what successive polls return.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Protocol, TypeAlias, runtime_checkable

from hicache.runtime.handles import CacheExtentRef, Kind, RequestRuntimeHandle, pools_of
from hicache.runtime.slot_init import slot_init, slot_twin

# an L3 page key (hicache.tiers.hashing): SGLang's hex SHA-256 (cache.l3_key_scheme sha256,
# what real stores take) or a chain64 int (simulated stores, which only compare keys)
L3Key: TypeAlias = str | int


class CapacityError(RuntimeError):
    """A plan needs more pages than a pool holds: the control side did not account."""


class Phase(enum.Enum):
    PREFILL = "prefill"  # one chunk of a (possibly chunked) prefill
    DECODE = "decode"  # one token


# read in decode_slice, once per running request per decode step: a module constant, not
# the Enum class attribute (on CPython 3.11 a read of one goes through EnumType's slow
# __getattr__ hook, ~10x a global's: ARCHITECTURE.md)
_DECODE = Phase.DECODE


@slot_init
@dataclass(frozen=True, slots=True)
class LoadIntent:
    """Restore host pages (L2) to the device before this batch's attention reads them.

    The runtime allocates ``src.num_pages`` device pages, copies layer by layer and makes
    compute wait per layer; the new device extent comes back in the prepared handle.
    """

    src: CacheExtentRef


@slot_init
@dataclass(frozen=True, slots=True)
class BackupIntent:
    """Copy device pages to newly allocated host pages (D2H) after this batch's compute."""

    src: CacheExtentRef
    job_id: int


@slot_init
@dataclass(frozen=True, slots=True)
class StoreIntent:
    """Write host pages to L3 under their page-hash keys (skipping keys L3 already has)."""

    src: CacheExtentRef
    keys: tuple[L3Key, ...]
    job_id: int


@slot_init
@dataclass(frozen=True, slots=True)
class PrefetchIntent:
    """Query L3 for ``keys`` (a page-hash chain) in batches, stop at the first miss, and fetch
    the hit prefix into at most ``max_pages`` new host pages. Revoked (nothing fetched) when
    fewer than ``min_hit_pages`` pages hit. ``batch_pages`` is the query/fetch batch size."""

    keys: tuple[L3Key, ...]
    max_pages: int
    min_hit_pages: int
    job_id: int
    batch_pages: int = 128


@slot_init
@dataclass(frozen=True, slots=True)
class RequestSlice:
    """One request's work in a batch.

    ``request`` is None on the request's first slice; the runtime then opens a row and
    returns its handle. On the first slice ``attach`` lists the cached device extents
    (in token order) that form the start of its KV, ``loads`` the host extents restored
    right after them. ``attach`` may also hold extents of pool "swa" (the SWA pages of
    the window that ends at the attached FULL pages, borrowed) and one of pool "mamba" (a
    cached checkpoint there: the runtime copies it into the request's private state slot,
    copy-on-write; the cached slot is not modified). Such a state extent may be on L2
    (hybrid load-back): the runtime loads it into new L1 pages (a new slot) of its pool
    before the slice's compute reads it, and uses them in its place; their L1 extents
    follow the FULL loads' in ``PreparedSlice.loaded`` (in attach order), and the cache
    tree owns them, as it owns loaded FULL pages. (State pieces sit in attach, not in
    ``loads``, because an SWA window interleaves L1 and L2 pages in token order and
    attach is that order.) ``context_tokens`` is the KV length
    before this slice, ``new_tokens`` the tokens computed now (a prefill chunk, or 1 for
    decode).
    """

    rid: int
    phase: Phase
    context_tokens: int
    new_tokens: int
    request: RequestRuntimeHandle | None = None
    attach: tuple[CacheExtentRef, ...] = ()
    loads: tuple[LoadIntent, ...] = ()
    finishes: bool = False  # last slice of the request: its last token is produced here
    # take a snapshot of the request's non-FULL state at the end of this slice (which must
    # end on a page boundary): a copy of its MAMBA state into a new checkpoint slot, and the
    # SWA pages of the window ending here stay held until the Release (keep may take them)
    checkpoint: bool = False


# decode_slice sets these slots, in this order; a field added to RequestSlice must be set
# there too (checked here, at import)
_SLICE_FIELDS = ("rid", "phase", "context_tokens", "new_tokens", "request", "attach", "loads",
                 "finishes", "checkpoint")
if tuple(f.name for f in fields(RequestSlice)) != _SLICE_FIELDS:  # pragma: no cover
    raise TypeError("RequestSlice's fields changed: update decode_slice")


_SLICE, _SliceBuilder = RequestSlice, slot_twin(RequestSlice)


def decode_slice(rid: int, context_tokens: int, request: RequestRuntimeHandle,
                 finishes: bool) -> RequestSlice:
    """``RequestSlice(rid, Phase.DECODE, context_tokens, 1, request, finishes=finishes)``,
    equal to it field for field: a scheduler builds one per running request per decode
    batch, and the class call with its ``__init__`` (a descriptor ``__set__`` call per
    field, each a C call with an argument tuple) costs several times this: filled by
    plain slot stores as its :func:`slot_twin`, then re-classed (as :func:`slot_builder`
    builds, with the constant fields in line)."""
    s = _SliceBuilder()
    s.rid = rid
    s.phase = _DECODE
    s.context_tokens = context_tokens
    s.new_tokens = 1
    s.request = request
    s.attach = ()
    s.loads = ()
    s.finishes = finishes
    s.checkpoint = False
    s.__class__ = _SLICE  # type: ignore[assignment]
    return s  # type: ignore[return-value]


@slot_init
@dataclass(frozen=True, slots=True)
class Release:
    """Close a request's row. ``keep`` (pages of the request's own KV, in order) passes to
    the cache tree; the runtime frees the rest of the pages it allocated for the request.
    ``keep`` is one extent or a tuple of extents of several pools (full, swa, mamba
    checkpoint slots); :meth:`kept` gives the tuple either way."""

    request: RequestRuntimeHandle
    keep: CacheExtentRef | tuple[CacheExtentRef, ...] | None = None

    def kept(self) -> tuple[CacheExtentRef, ...]:
        if self.keep is None:
            return ()
        return self.keep if isinstance(self.keep, tuple) else (self.keep,)


@slot_init
@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Everything the control side decided for one step; ``slices`` may be empty (a plan
    that only moves or frees cache). Ids are unique per runtime; the scheduler numbers
    compute batches 1, 2, ... and cache-only plans -1, -2, ..."""

    batch_id: int
    slices: tuple[RequestSlice, ...] = ()
    backups: tuple[BackupIntent, ...] = ()
    stores: tuple[StoreIntent, ...] = ()
    prefetches: tuple[PrefetchIntent, ...] = ()
    frees: tuple[CacheExtentRef, ...] = ()
    releases: tuple[Release, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(s.new_tokens for s in self.slices)


@slot_init
@dataclass(frozen=True, slots=True)
class PreparedSlice:
    rid: int
    request: RequestRuntimeHandle
    kv: CacheExtentRef  # the request's whole device KV after this slice, in token order
    # device extents the loads landed in (same order), then those of the attach's L2 state
    # extents (attach order)
    loaded: tuple[CacheExtentRef, ...]
    # the request's extents in other pools after this slice: its SWA pages as the run of
    # held pages that ends at its last page (token order), and, after a checkpoint slice,
    # the new MAMBA checkpoint (1 page of pool "mamba", the request's own until Release)
    state: tuple[CacheExtentRef, ...] = ()


@slot_init
@dataclass(frozen=True, slots=True)
class PreparedBatchHandle:
    runtime_id: str
    generation: int
    batch_id: int
    slices: tuple[PreparedSlice, ...]
    backups: tuple[CacheExtentRef, ...]  # host extents allocated for plan.backups (same order)


@slot_init
@dataclass(frozen=True, slots=True)
class BatchCompletion:
    """A batch's compute finished at ``end`` (runtime time, seconds)."""

    batch_id: int
    start: float
    end: float
    finished: tuple[int, ...]  # rids whose last token was produced


class TransferKind(enum.Enum):
    BACKUP = "backup"  # L1 -> L2
    STORE = "store"  # L2 -> L3
    PREFETCH = "prefetch"  # L3 -> L2


@slot_init
@dataclass(frozen=True, slots=True)
class TransferCompletion:
    job_id: int
    kind: TransferKind
    end: float
    pages: int  # pages moved (prefetch: the hit prefix fetched; 0 when revoked)
    extent: CacheExtentRef | None = None  # prefetch: the host pages that now hold them
    hit_pages: int = 0  # prefetch: consecutive L3 hits found by the query


Completion = BatchCompletion | TransferCompletion


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """What the control side may account for. Page counts are per pool and tier."""

    runtime_id: str
    generation: int
    page_size: int
    device_pages: dict[Kind, int]  # pool -> pages (names such as "swa" are read as Kind)
    host_pages: dict[Kind, int]
    bytes_per_page: dict[Kind, int] = field(default_factory=dict)  # per pool, sidecars in
    num_layers: int = 1
    swa_window: int = 0  # tokens the runtime keeps per request in its SWA pool (0: no pool)
    mamba: bool = False  # the runtime keeps MAMBA state slots (1 page = 1 slot)

    def __post_init__(self) -> None:  # runtimes built from configurations name pools
        for name in ("device_pages", "host_pages", "bytes_per_page"):
            object.__setattr__(self, name, pools_of(getattr(self, name)))


@runtime_checkable
class RuntimeInterface(Protocol):
    """Implemented by ``sim.SimRuntime`` and ``gpu_backend.TorchRuntime``."""

    def info(self) -> RuntimeInfo: ...

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        """Place the whole plan or raise and change nothing (see the module docstring)."""
        ...

    def execute_batch(self, handle: PreparedBatchHandle) -> None:
        """Start the batch; its BatchCompletion arrives later through :meth:`poll`."""
        ...

    def poll(self) -> list[Completion]:
        """Completions that arrived since the last poll, in order (never blocks)."""
        ...

    def wait(self, timeout: float | None = None) -> list[Completion]:
        """Completions, waiting up to ``timeout`` seconds of the runtime's clock (None:
        until one arrives, or nothing more can) for the first; [] if none came. Does not
        wait when completions are already queued."""
        ...


@runtime_checkable
class EventLoopRuntime(RuntimeInterface, Protocol):
    """A runtime inside a discrete-event loop (SimPy): a driver that is itself a process
    of that loop cannot block in :meth:`wait`, so it waits for this event instead (it
    fires when :meth:`poll` has something) alongside its other events."""

    def completion_event(self) -> object: ...
