"""The L3 prefetch decision: prefetch on arrival, the stop policy at the queue head.

    arrival ── match L1/L2 ── rest >= prefetch_threshold? ── PrefetchIntent (query in
       batches, stop at the first miss, fetch the hit prefix into L2), L1/L2 prefix it
       continues protected (as SGLang protects last_host_node)
    queue head ── stop policy (best_effort / wait_complete / timeout) ── admit

Prefetches started on arrival share at most ``share`` of L2 (``scheduler.prefetch_share``,
default :data:`PREFETCH_SHARE`). What happens to a prefetch over the share is
``scheduler.prefetch_over_share``:

- ``wait`` (default): arrival prefetches never evict L2 and start only if all of the
  request's rest fits the share; a request that finds no room waits for it (later
  arrivals wait behind it), and the request at the head of the queue may take, and
  make, any L2 room.
- ``skip`` (SGLang's ``prefetch_from_storage`` / ``prefetch_rate_limited``): on arrival
  only, a prefetch starts when the tokens held by prefetches in flight are below the
  share (one may overshoot it), reserves all of the rest, evicting L2 for it; one over
  the share, or without L2 room after eviction, is skipped for good (no retry at the
  queue head).

With ``requery_lost_prefix`` (a hicache-lab knob, off = SGLang) a request whose
arrival-time prefetch found nothing, and whose L1/L2 prefix was evicted while it queued,
asks L3 once more from the shorter match.

Collaborators: the cache manager's tree, page budget (the L2 reservation), intent sink
(the PrefetchIntent, frees of pages fetched for a prefix that left) and decision log.
A prefetch that completes after its request was admitted (best_effort, timeout) still
caches what it fetched, but nothing holds it for the request any more.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from hicache.kvcache.decisions import Prefetch, PrefetchStop
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.state import RequestState, Status
from hicache.runtime.handles import CacheExtentRef, Tier
from hicache.runtime.interface import PrefetchIntent, TransferCompletion
from hicache.runtime.slot_init import slot_builder
from hicache.tiers.prefetch import prefetch_timeout, should_query, stop_decision
from hicache.tree.components import Kind
from hicache.tree.radix import MatchResult

_PREFETCHING, _DONE = Status.PREFETCHING, Status.DONE  # hot: Enum reads (ARCHITECTURE.md)
_FULL, _HOST = Kind.FULL, Tier.HOST

# built per prefetch started: at slot speed (slot_builder; ARCHITECTURE.md)
_prefetch, _prefetch_intent = slot_builder(Prefetch), slot_builder(PrefetchIntent)
_prefetch_stop = slot_builder(PrefetchStop)

# a queue head waiting for its own prefetch under ``timeout`` is still until its deadline
# (still): off, never (the twin tests' switch: folds then stop at such a head)
STILL_UNTIL_DEADLINE = True
PREFETCH_SHARE = 0.25  # at most this share of L2 is reserved for L3 prefetches in flight
OVER_SHARE_MODES = ("wait", "skip")  # what a prefetch over the share does (module doc)


class L3Prefetcher:
    def __init__(self, kv: KVCacheManager, *, requery_lost_prefix: bool = True,
                 share: float = PREFETCH_SHARE, over_share: str = "wait") -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"prefetch_share: {share} is not in (0, 1]")
        if over_share not in OVER_SHARE_MODES:
            raise ValueError(f"prefetch_over_share: {over_share!r} is not one of "
                             f"{', '.join(OVER_SHARE_MODES)}")
        self.kv, self.cache, self.tree = kv, kv.cache, kv.tree
        self.budget, self.page = kv.budget, kv.page
        self.requery_lost_prefix = requery_lost_prefix
        self.share, self.skip_over_share = share, over_share == "skip"
        self.jobs: dict[int, RequestState] = {}
        # queued requests whose prefetch is undecided (prefetch_job None), in queue order:
        # the queue's tail, as only its front is ever decided (see on_arrivals)
        self.undecided: deque[RequestState] = deque()
        self.reserved = 0  # L2 pages reserved by prefetches in flight
        self.threshold_pages = self.cache.prefetch_threshold_pages
        # ready()'s short answer for a head waiting for its own prefetch (see there)
        self.waits_own = self.cache.hicache_storage_prefetch_policy == "wait_complete"
        self.times_out = self.cache.hicache_storage_prefetch_policy == "timeout"
        self._timeouts: dict[int, float] = {}  # prefetch pages -> timeout (see _timeout)
        # on_arrivals' last refused start: (rid, tree shape, rest), None: none refused
        self._refused: tuple[int, int, int] | None = None

    def _share_left(self) -> int:
        return int(self.budget.host_total * self.share) - self.reserved

    # -- called by the scheduler ----------------------------------------------------
    def queued(self, st: RequestState) -> None:
        """``st`` joined the scheduler's waiting queue (its prefetch is undecided)."""
        self.undecided.append(st)

    def _undecided(self) -> deque[RequestState]:
        """:attr:`undecided` without its front requests decided meanwhile at the queue
        head (:meth:`ready`)."""
        undecided = self.undecided
        while undecided and undecided[0].prefetch_job is not None:
            undecided.popleft()
        return undecided

    def on_arrivals(self, now: float) -> None:
        """Start prefetches for arrived requests, FIFO, while the L2 share has room.

        The queue's undecided requests are its tail (arrivals append undecided ones; this
        decides them front first and stops at the first it cannot; the queue head is
        decided before it leaves), so walking :attr:`undecided` visits them in the order
        a walk of the whole queue would, without re-reading the decided front."""
        undecided = self._undecided()
        if self.skip_over_share:
            while undecided and undecided[0].req.arrival <= now:
                self._start_or_skip(undecided.popleft())
            return
        threshold = self.threshold_pages
        if self._share_left() < threshold:
            return
        while undecided:
            st = undecided[0]
            if st.req.arrival > now:
                break
            if self._refused is not None and self._refusal_stands(st):
                break  # start() would refuse it again: no match, no lock
            m = self.tree.match(st.pages, touch=False, memo=True)
            if not self.start(st, m):
                # its match, to the split it made: rest cannot change before the shape
                self._refused = (st.rid, self.tree.shape,
                                 len(st.pages) - m.total_tokens // self.page)
                break  # no L2 room for it; later arrivals wait behind it
            undecided.popleft()
            if self._share_left() < threshold:
                break

    def _refusal_stands(self, st: RequestState) -> bool:
        """:meth:`start` of the undecided front ``st`` on arrival (not at the head, not
        ``whole``) would refuse again, as :meth:`on_arrivals` saw it refuse: the tree's
        :attr:`~UnifiedRadixTree.shape` (all a read-only match reads) is unchanged, so
        its rest is the same, and the share left or the L2 room is still short of it.
        A refusal changes nothing but the stamps of the host lock it takes on its
        match's path and drops again, which decide nothing."""
        refused = self._refused
        if refused is None or refused[0] != st.rid or refused[1] != self.tree.shape:
            return False
        rest = refused[2]
        room = min(rest, self._share_left(), self.budget.host_free())  # start's max_pages
        return room < self.threshold_pages or room < rest

    def _start_or_skip(self, st: RequestState) -> None:
        """``skip``: decide ``st`` once: start its prefetch, or never."""
        if self._share_left() <= 0:  # SGLang: occupied >= limit -> rate limited
            st.prefetch_job = 0
            return
        self.start(st, self.tree.match(st.pages, touch=False, memo=True), whole=True)

    def ready(self, st: RequestState, now: float) -> bool:
        """At the queue head: may ``st`` be admitted now (its stop policy says go)?
        A head whose own prefetch runs gets its policy's answer at once when that is no
        (:meth:`_waits`): the steps below would change nothing and ask the policy (it has
        its job, and a lost prefix needs the prefetch done)."""
        if st.status is _PREFETCHING and not st.prefetch_done and (
                self.waits_own or self._waits(st, now)):
            return False
        if self.skip_over_share and st.prefetch_job is None:
            self._start_or_skip(st)  # not seen on arrival: decided as one
        if st.prefetch_job is None or self._lost_prefix(st):
            self.start(st, self.tree.match(st.pages, touch=False, memo=True), at_head=True)
        if st.status is not _PREFETCHING:
            return True
        policy = self.cache.hicache_storage_prefetch_policy
        if policy == "wait_complete" and not st.prefetch_done:
            return False  # what stop_decision says, without building its answer
        d = stop_decision(policy, now=now,
                          arrival=st.req.arrival, completed=st.prefetch_done,
                          hit_tokens=st.prefetch_pages * self.page, cfg=self.cache)
        if not d.proceed:
            return False
        self.kv.log(_prefetch_stop(st.rid, d.reason))
        st.status = Status.WAITING
        return True

    def _waits(self, st: RequestState, now: float) -> bool:
        """``not stop_decision(...).proceed`` for ``st``, prefetching and not completed,
        under ``timeout`` (``wait_complete`` is :attr:`waits_own`, ``best_effort`` goes):
        the same comparison, its timeout from :meth:`_timeout`."""
        return self.times_out and now - st.req.arrival < self._timeout(st.prefetch_pages)

    def _timeout(self, pages: int) -> float:
        """:func:`prefetch_timeout` of a prefetch that brought ``pages`` (a pure function
        of them and the config: remembered per value, never stale)."""
        timeout = self._timeouts.get(pages)
        if timeout is None:
            timeout = self._timeouts[pages] = prefetch_timeout(pages * self.page, self.cache)
        return timeout

    def still(self, head: RequestState) -> bool:
        """Until a completion or an arrival, :meth:`on_arrivals` and :meth:`ready` of the
        queue's ``head`` change nothing: no arrived request may start a prefetch (none
        undecided, the L2 share is spent, or the undecided front's start would refuse
        again: :meth:`_refusal_stands`), and the head is not prefetching or waits for
        its own completion (``wait_complete``), or under ``timeout`` until its deadline
        (:meth:`deadline`: only the head's moves the queue by time alone, :meth:`ready`
        reads no other request's, and a head not prefetching has none; the caller ends
        before it, ``Scheduler.fold_deadline``). ``best_effort`` goes at once. A lost
        prefix (:meth:`_lost_prefix`) reads only the tree."""
        policy = self.cache.hicache_storage_prefetch_policy
        undecided = self._undecided()
        if undecided and (self.skip_over_share  # skip decides every arrival at once
                          or (self._share_left() >= self.threshold_pages
                              and not self._refusal_stands(undecided[0]))):
            return False
        if head.status is _PREFETCHING:
            if head.prefetch_done:
                return False
            return policy == "wait_complete" or (STILL_UNTIL_DEADLINE and self.times_out)
        return True

    def deadline(self, st: RequestState) -> float:
        """When ``st``'s prefetch times out under ``timeout`` (:func:`stop_decision`'s
        ``arrival + timeout``, as :meth:`next_deadline` reads it)."""
        return st.req.arrival + self._timeout(st.prefetch_pages)

    def next_deadline(self, waiting: Iterable[RequestState], now: float) -> float | None:
        """The earliest ``timeout`` deadline after ``now`` of a prefetching request
        (:func:`stop_decision`'s ``arrival + timeout``, its timeout from :meth:`_timeout`)."""
        if not self.times_out:
            return None
        times = []
        for st in waiting:
            if st.status is _PREFETCHING:
                deadline = self.deadline(st)
                if deadline > now:
                    times.append(deadline)
        return min(times) if times else None

    def done(self, c: TransferCompletion) -> None:
        st = self.jobs.pop(c.job_id)
        self.budget.host_reserved -= st.prefetch_reserved
        self.reserved -= st.prefetch_reserved
        st.prefetch_done = True
        if c.pages and c.extent is not None:
            self._insert(st, c.extent)
        if st.prefix_lock is not None:  # the fetched nodes' locks now pin their path
            self.tree.unlock(st.prefix_lock)
            st.prefix_lock = None
        if st.status is _DONE:
            st.forget()  # it finished while this prefetch ran

    # -- the decision ------------------------------------------------------------------
    def _lost_prefix(self, st: RequestState) -> bool:
        if (not self.requery_lost_prefix or st.requeried or not st.prefetch_done
                or st.prefetch_pages):
            return False
        held = self.tree.match(st.pages, touch=False, memo=True).total_tokens
        if held >= st.prefetch_from * self.page:
            return False
        st.requeried, st.prefetch_done, st.status = True, False, Status.WAITING
        return True

    def start(self, st: RequestState, m: MatchResult, at_head: bool = False,
              whole: bool = False) -> bool:
        """Issue ``st``'s prefetch if worthwhile and there is room; False = no room yet.
        ``m``: the tree's match of ``st.pages`` just now (nothing changed since).
        ``whole`` (``skip``): all of the rest, making L2 room for it, or nothing, for good."""
        reused = m.total_tokens // self.page
        rest = len(st.pages) - reused
        if rest <= 0 or not should_query(rest * self.page, self.cache):
            st.prefetch_job = 0  # decided: nothing worth fetching
            return True
        # protect the L1/L2 prefix the prefetch continues, before making L2 room for it:
        # if L2 evicted it (now, or while the request queues), the fetched pages would
        # hang on nothing (SGLang host-locks last_host_node first, too)
        # m.path ends where the L1/L2 prefix does: what a match of st.pages[:reused] walks
        lock = self.tree.locks.lock_host(m.path)
        budget = rest if at_head or whole else self._share_left()
        if (at_head or whole) and rest > self.budget.host_free():
            self.kv.make_room(_HOST, rest)
        max_pages = min(rest, budget, self.budget.host_free())
        if max_pages < self.threshold_pages or (max_pages < rest
                                                                 and not at_head):
            # no room: a partial prefetch would fetch a sliver; wait for room or the head
            # (``whole``: skipped for good)
            self.tree.unlock(lock)
            if at_head or whole:
                st.prefetch_job = 0
            return at_head or whole
        job = self.kv.sink.next_job_id()
        self.reserved += max_pages
        self.budget.host_reserved += max_pages
        self.jobs[job] = st
        st.prefetch_job, st.prefetch_from, st.prefetch_reserved = job, reused, max_pages
        st.status = _PREFETCHING
        st.prefix_lock = lock
        self.kv.log(_prefetch(st.rid, reused, max_pages))
        self.kv.sink.prefetch(_prefetch_intent(
            tuple(st.hashes[reused:reused + max_pages]), max_pages,
            self.threshold_pages, job, self.cache.prefetch_batch_pages))
        return True

    def _insert(self, st: RequestState, ext: CacheExtentRef) -> None:
        """Fetched pages become host-only nodes, held for the request until it is admitted
        (one admitted meanwhile leaves them to the cache)."""
        start = st.prefetch_from
        end = start + ext.num_pages
        if start and self.tree.match(st.pages[:start], touch=False).matched_pages < start:
            self.kv.sink.free(ext)  # the prefix left the tree meanwhile
            return
        res = self.tree.insert(st.pages[:end], {_FULL: ext}, tier=_HOST)
        self.kv.apply(res.actions)
        if st.admitted is not None:
            return
        st.prefetch_pages = ext.num_pages
        path = self.tree.reuse_path(res.node)  # the match of st.pages[:end], no walk
        st.prefetch_lock = self.tree.locks.lock_host([n for n in path if n.on_host])
