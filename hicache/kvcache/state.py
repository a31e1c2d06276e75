"""Per-request control-side state and the records the scheduler emits.

It lives with the cache manager (the lowest layer that reads it): the manager, the L3
prefetcher and the component tracker fill it in, the scheduler and replay drive it
(``tests/architecture`` checks that no lower layer imports the scheduler).

Lifecycle::

    WAITING ──(L3 prefetch issued)──> PREFETCHING ──(stop policy says go)──┐
       └───────────────────────────────────────────────────────────────────┴─> RUNNING
    RUNNING: prefill chunks (planned, then completed) -> decode tokens -> DONE
    on arrival, a request that can never be served -> REJECTED (``rejected`` says why)

``prefill_planned`` runs ahead of ``prefill_done`` by at most the batches in flight
(overlap scheduling prepares batch N+1 while N executes).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from hicache.runtime.handles import CacheExtentRef, RequestRuntimeHandle
from hicache.tiers.hashing import L3Key
from hicache.tree.components import Kind
from hicache.tree.locks import LockHandle
from hicache.workload.request import Request


class Status(enum.Enum):
    WAITING = "waiting"
    PREFETCHING = "prefetching"
    RUNNING = "running"
    DONE = "done"
    REJECTED = "rejected"


@dataclass(eq=False, slots=True)
class RequestState:
    """One request's control-side state (module doc). Slotted: CPython 3.11 keeps a
    plain instance's attributes in its compact shared-key layout only while it has fewer
    than 30 (about 330 bytes at 29); one of these 40-odd was a dict of its own (1.6 kB)
    with a hashed lookup per read, where slots are fixed offsets. The fields a planning
    pass or a completion reads for every running request come first (``rid``,
    ``prompt_len``, ``output_len``: copies of the frozen request's), within the
    object's first two cache lines."""

    req: Request
    pages: list | tuple  # page keys of the prompt's full pages (() once forgotten)
    rid: int = field(init=False)  # the request's (frozen), read in every planning pass
    prompt_len: int = field(init=False)
    output_len: int = field(init=False)
    replica: int = 0
    status: Status = Status.WAITING
    prefix_tokens: int = 0  # reused from the tree (attached + loaded), page aligned
    prefill_planned: int = 0  # prompt tokens planned beyond the prefix
    prefill_done: int = 0
    # output tokens planned after the first one; no count of them done is kept (one
    # would be a store per running request per decode step that nothing reads: a
    # request's decode steps end with the slice that ``finishes``)
    decode_planned: int = 0
    handle: RequestRuntimeHandle | None = None
    kv: CacheExtentRef | None = None
    hashes: list[L3Key] | tuple = field(default_factory=list)  # L3 page keys (L3 only)
    lock: LockHandle | None = None
    host_lock: LockHandle | None = None
    donated: list[CacheExtentRef] | tuple = field(default_factory=list)
    donated_pages: int = 0
    inserted_pages: int = 0  # pages it inserted into the tree so far (cache.hit_count)
    prefetch_job: int | None = None  # None: undecided, 0: no prefetch, else the job id
    requeried: bool = False  # asked L3 a second time at the queue head
    prefetch_from: int = 0  # first page the prefetch asked L3 for
    prefetch_reserved: int = 0  # L2 pages reserved for it while in flight
    prefix_lock: LockHandle | None = None  # L1/L2 path matched at prefetch time, held
    prefetch_lock: LockHandle | None = None  # the fetched L2 nodes, held until admission
    load_nodes: list | tuple = field(default_factory=list)  # L2-only nodes loaded at admission
    attach: tuple[CacheExtentRef, ...] = ()  # L1 extents reused at admission
    prefetch_pages: int = 0  # pages the L3 prefetch brought to L2 for this request
    prefetch_done: bool = False
    admitted: float | None = None
    first_token: float | None = None
    finish: float | None = None
    rejected: str | None = None  # why the request was refused on arrival
    # track_components only: state-pool reservations, the last checkpoint's extents
    # (PreparedSlice.state), and the extents donated to the tree, per pool
    reserved: dict[Kind, int] = field(default_factory=dict)
    slice_pages: int = 0  # SWA pages its largest slice allocates at once (components)
    chunk_locks: list[LockHandle] | tuple = field(default_factory=list)  # SWA locks of chunk ends
    checkpoint: tuple[CacheExtentRef, ...] = ()
    state_donated: dict[Kind, list[CacheExtentRef]] = field(default_factory=dict)
    device_hit: int = 0
    host_hit: int = 0
    l3_hit: int = 0

    def __post_init__(self) -> None:
        req = self.req
        self.rid, self.prompt_len, self.output_len = req.rid, req.prompt_len, req.output_len

    def forget(self) -> None:
        """The request is done: drop what only serving it needed (page keys, hashes, its
        released lock handles and the nodes they and ``load_nodes`` point at, its runtime
        handle and the extents of its row, of its prefix, of its last checkpoint and of
        what it handed the tree, and its prompt's page keys memoised on its tokens). Its
        record keeps everything a report reads; memory stays proportional to what the
        cache holds, not to every token a long run served (an hour of chat held 16 GiB
        through finished requests: benchmarks/soak.py), and so does the heap the cyclic
        collector scans: the emptied containers are one shared empty tuple (a list is
        tracked even empty), and a finished request keeps no extent (full trace: 12,031
        requests held 159k page runs and 2.3M page keys to the end of the run, 43% of the
        objects the collector tracked)."""
        self.pages = self.hashes = self.load_nodes = self.donated = self.chunk_locks = ()
        self.lock = self.host_lock = self.prefix_lock = self.prefetch_lock = None
        self.handle = self.kv = None
        self.attach = self.checkpoint = ()
        self.state_donated = {}  # empty: a dict the collector does not track
        drop = getattr(self.req.tokens, "drop_page_keys", None)
        if drop is not None:
            drop()

    @property
    def to_prefill(self) -> int:
        return self.prompt_len - self.prefix_tokens

    def record(self) -> dict:
        out = self.output_len
        itl = None
        if self.finish is not None and self.first_token is not None and out > 1:
            itl = (self.finish - self.first_token) / (out - 1)
        return {
            "rid": self.rid, "replica": self.replica, "client": self.req.client,
            "round": self.req.round, "session_id": self.req.session_id,
            "arrival": self.req.arrival, "admitted": self.admitted,
            "first_token": self.first_token, "finish": self.finish,
            "prompt_tokens": self.prompt_len, "output_tokens": out,
            "cached_tokens": self.device_hit + self.host_hit + self.l3_hit,
            "device_hit": self.device_hit, "host_hit": self.host_hit, "l3_hit": self.l3_hit,
            "ttft": None if self.first_token is None else self.first_token - self.req.arrival,
            "itl_mean": itl, "rejected": self.rejected,
        }
