"""The control-side scheduler: a synchronous state machine over one RuntimeInterface.

    step(now, arrivals, completions) -> StepResult(plans, finished, rejected)

Each step (1) applies completions (batches: progress, prompt pages into the cache,
releases; transfers: the cache manager's backups and stores, the prefetcher's fetches),
(2) admits waiting requests FIFO through the cache manager (L1/L2 match, load-back, L3
prefetch under its stop policy, room made by eviction; each admitted request reserves its
whole footprint, so no preemption is needed), and (3) emits the next plan while fewer than
``max_inflight`` batches are outstanding: a prefill batch (chunked) if any prompt work is
waiting, else a decode batch. With overlap on (max_inflight 2) batch N+1 is planned and
its loads start while N runs. A request that can never be served (it needs more L1 than
exists, or ``max_running_requests`` is 0) is rejected on arrival with a reason.

The scheduler never reads a clock, holds no stream, event or physical address: only
handles, extents and page *counts*. Cache policy lives in :mod:`hicache.kvcache`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, fields

from hicache.config import CacheConfig
from hicache.kvcache.components import ComponentTracker
from hicache.kvcache.decisions import Decision, Reject
from hicache.kvcache.manager import KVCacheManager
from hicache.kvcache.plans import PlanBuilder
from hicache.kvcache.prefetch import PREFETCH_SHARE, L3Prefetcher
from hicache.kvcache.state import RequestState, Status
from hicache.runtime.interface import (
    BatchCompletion,
    BatchPlan,
    Completion,
    LoadIntent,
    Phase,
    PreparedBatchHandle,
    RequestSlice,
    RuntimeInfo,
    TransferKind,
)
from hicache.runtime.slot_init import slot_builder, slot_init, slot_twin
from hicache.tiers.hashing import l3_page_keys
from hicache.tree.components import Kind, TreeSpec
from hicache.tree.invariants import TreeInvariantError, check_tree
from hicache.tree.radix import UnifiedRadixTree, page_keys
from hicache.workload.request import Request


@dataclass(frozen=True)
class SchedulerConfig:
    max_running_requests: int = 128
    chunked_prefill_size: int = 8192  # prompt tokens per prefill batch
    overlap: bool = True  # plan batch N+1 while N executes
    l3: bool = False  # an L3 tier is attached to the runtime
    requery_lost_prefix: bool = True  # re-ask L3 at the queue head if L1/L2 lost the prefix
    prefetch_share: float = PREFETCH_SHARE  # share of L2 arrival-time L3 prefetches may hold
    prefetch_over_share: str = "wait"  # a prefetch over the share: wait (ours) / skip (SGLang)
    track_components: bool = False  # track the runtime's SWA / MAMBA pools too (L1, L2)


_DECODE, _PREFILL = Phase.DECODE, Phase.PREFILL  # hot: Enum reads (ARCHITECTURE.md)
_FULL, _PREFETCH = Kind.FULL, TransferKind.PREFETCH
_PREFETCHING, _DONE = Status.PREFETCHING, Status.DONE

# scenario keys of the ``scheduler:`` section (the rest of SchedulerConfig is derived)
SCHEDULER_KEYS = frozenset(f.name for f in fields(SchedulerConfig)) - {"l3"}


@slot_init
@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step produced: plans to prepare and execute (at most one; step again
    after :meth:`Scheduler.prepared` to fill the overlap pipeline), requests that produced
    their last token, and requests refused on arrival."""

    plans: tuple[BatchPlan, ...] = ()
    finished: tuple[int, ...] = ()
    rejected: tuple[int, ...] = ()

    @property
    def ended(self) -> tuple[int, ...]:
        """Requests that will do nothing more: finished, then rejected."""
        return self.finished + self.rejected


_NOTHING = StepResult()  # a step that planned and ended nothing (immutable: shared)
# built per step that plans or ends something, per load: at slot speed (slot_builder)
_step_result, _load_intent = slot_builder(StepResult), slot_builder(LoadIntent)
_request_slice = slot_builder(RequestSlice)
# _next_plan fills this twin (made by a bare call: slot_twin) with decode_slice's stores
# in line, then re-classes it
_SliceTwin = slot_twin(RequestSlice)
# those stores, in this order: a field added to RequestSlice must be set there too
if tuple(f.name for f in fields(RequestSlice)) != (  # pragma: no cover
        "rid", "phase", "context_tokens", "new_tokens", "request", "attach", "loads",
        "finishes", "checkpoint"):
    raise TypeError("RequestSlice's fields changed: update Scheduler._next_plan's decode")


class Scheduler:
    def __init__(self, cache: CacheConfig, info: RuntimeInfo, cfg: SchedulerConfig,
                 replica: int = 0) -> None:
        self.cache, self.info, self.cfg, self.replica = cache, info, cfg, replica
        self.page = info.page_size
        if cfg.track_components and cache.enable_hierarchical_cache and (
                cfg.l3 or cache.hicache_buffer_only):
            raise ValueError("scheduler.track_components: L1 and L2 only; SWA windows and "
                             "MAMBA checkpoints do not go to L3 (hicache/kvcache/"
                             "hybrid_tiers.py says why): drop cache.hicache_storage_backend")
        spec = (TreeSpec.hybrid(self.page, swa_window=info.swa_window, mamba=info.mamba)
                if cfg.track_components else TreeSpec(self.page))
        self.plans = PlanBuilder()
        self.kv = KVCacheManager(cache, info, self.plans, l3=cfg.l3, spec=spec)
        self.l3 = (L3Prefetcher(self.kv, requery_lost_prefix=cfg.requery_lost_prefix,
                                share=cfg.prefetch_share, over_share=cfg.prefetch_over_share)
                   if self.kv.l3 else None)
        # prefetches time out (the ``timeout`` policy): else :meth:`next_deadline` is None
        self.times_out = self.l3 is not None and self.l3.times_out
        self.components = (ComponentTracker(self.kv, info, cfg.chunked_prefill_size)
                           if cfg.track_components else None)
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self._prefilling: list[RequestState] = []  # running with prompt left to plan, in order
        self.requests: dict[int, RequestState] = {}
        self.finished: list[RequestState] = []
        self._rejected: list[int] = []
        self._now = float("-inf")  # the last step's time

    @property
    def tree(self) -> UnifiedRadixTree:
        return self.kv.tree

    @property
    def decisions(self) -> list[Decision]:
        return self.kv.decisions

    # -- public ----------------------------------------------------------------------
    def step(self, now: float, arrivals: Iterable[Request] = (),
             completions: Iterable[Completion] = ()) -> StepResult:
        """Apply arrivals and completions, admit, and return the next plan (at most one)."""
        self._now = now
        for req in arrivals:
            self._arrive(req)
        finished: list[int] = []
        for c in completions:
            if isinstance(c, BatchCompletion):
                finished.extend(self._batch_done(c))
            elif not self.kv.on_transfer(c) and c.kind is _PREFETCH:
                assert self.l3 is not None, "a prefetch completed without an L3"
                self.l3.done(c)
        self.kv.shrink()  # a pool shared with other schedulers may want pages back
        self._admit(now)
        plans = []
        if self.plans.computing < (2 if self.cfg.overlap else 1):  # compute_inflight()
            plan = self._next_plan()
            if plan is not None:
                plans.append(plan)
        if not plans and self.plans.has_pending:
            plans.append(self.plans.build())  # move or free cache with no compute
        if not (plans or finished or self._rejected):
            return _NOTHING  # most steps (the driver's re-step after a prepare): one value
        rejected: tuple[int, ...] = ()
        if self._rejected:
            rejected, self._rejected = tuple(self._rejected), []
        return _step_result(tuple(plans), tuple(finished), rejected)

    def prepared(self, handle: PreparedBatchHandle) -> None:
        """The runtime prepared a plan: learn request handles, KV and L2 extents."""
        plan = self.plans.inflight[handle.batch_id]
        requests, components = self.requests, self.components
        slices = plan.slices
        if components is None and slices and slices[0].phase is _DECODE:
            # a decode plan (_next_plan never mixes phases): no slice loads anything
            if len(handle.slices) != len(slices):
                raise ValueError(f"batch {handle.batch_id}: {len(handle.slices)} prepared "
                                 f"slices for {len(slices)} planned")
            for ps in handle.slices:
                st = requests[ps.rid]
                st.handle, st.kv = ps.request, ps.kv
        elif components is None:
            loaded = self.kv.loaded
            for ps, sl in zip(handle.slices, slices, strict=True):
                st = requests[ps.rid]
                st.handle, st.kv = ps.request, ps.kv
                if sl.loads:
                    loaded(st, ps.loaded)
        else:
            for ps, sl in zip(handle.slices, slices, strict=True):
                st = requests[ps.rid]
                st.handle, st.kv = ps.request, ps.kv
                components.prepared(st, sl, ps)
        if plan.backups or handle.backups:
            for intent, host in zip(plan.backups, handle.backups, strict=True):
                self.kv.backup_placed(intent.job_id, host)

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.running or self.awaiting_runtime)

    @property
    def awaiting_runtime(self) -> bool:
        """Work is in the runtime's hands: a plan or a copy will complete (and call back)."""
        return bool(self.plans.inflight or self.kv.busy or (self.l3 is not None
                                                            and self.l3.jobs))

    def next_deadline(self, now: float) -> float | None:
        """When a waiting request's prefetch timeout expires (so a driver can wake up)."""
        l3 = self.l3  # no timeout policy: no deadline (L3Prefetcher.next_deadline's test)
        return l3.next_deadline(self.waiting, now) if self.times_out and l3 is not None else None

    # -- steady decode (a simulator may advance several steps at once) ------------------
    def steady_decode(self, plan: BatchPlan) -> int:
        """How many decode batches in a row, ``plan`` (just returned by :meth:`step`) first,
        will have ``plan``'s request set, counting the first one in which a request takes
        its last token; 0 unless the pipeline is steady: overlap on, a still queue
        (:meth:`_queue_still`), no intent pending, none in ``plan`` but frees and releases
        (a runtime applies them at prepare), and the one compute batch in flight before
        ``plan`` a decode step of the same requests (its intents are the runtime's
        already). Cache-only plans may be in flight too (batch ids < 0): their intents are
        the runtime's, and their completion changes nothing here but pops them
        (:meth:`_batch_done` of a plan without slices). While it stays steady (no arrival,
        no transfer completion), one step is one ``BatchCompletion`` in (the first may
        come with those of the cache-only plans) and one decode plan out, and nothing else
        changes: what :meth:`fold_decode` applies at once."""
        slices = plan.slices
        # the cheap tests first: each is a pure test, so their order changes no answer (a
        # plan whose first slice is not a decode one fails _same_decode)
        if (not slices or slices[0].phase is not _DECODE or plan.backups or plan.stores
                or plan.prefetches or not self.cfg.overlap or self.components is not None
                or self.plans.computing != 2 or self.plans.has_pending):
            return 0
        inflight, running = self.plans.inflight, self.running
        prev = inflight.get(plan.batch_id - 1)
        if (prev is None or inflight.get(plan.batch_id) is not plan
                or len(slices) != len(running) or not self._queue_still()
                or not _same_decode(prev, plan)):
            return 0
        # plan's requests are the running ones: as many, each planned from one of them
        return min([st.output_len - st.decode_planned for st in running])

    def _queue_still(self) -> bool:
        """Until an arrival or a completion, no step admits a waiting request or starts a
        prefetch, and none changes anything: the queue is empty, or its head has arrived
        and is held by ``max_running_requests``, by its own L3 prefetch
        (:meth:`L3Prefetcher.still`; under ``timeout`` until its deadline,
        :meth:`fold_deadline`), or by the cache manager's remembered refusal
        (what that refusal read is unchanged: :meth:`KVCacheManager.refusal_stands`).
        Decode steps change none of it: they finish no request, touch neither the tree
        nor the budget; an arrival or a completion ends a fold."""
        if not self.waiting:
            return True
        head = self.waiting[0]
        if head.req.arrival > self._now or (self.l3 is not None and not self.l3.still(head)):
            return False
        if len(self.running) >= self.cfg.max_running_requests:
            return True
        if self.l3 is not None and head.status is _PREFETCHING:
            return True  # ready() says wait until its completion (or its deadline)
        return self.kv.refusal_stands(head)

    def fold_deadline(self) -> float | None:
        """When the queue stops being still by time alone (:meth:`_queue_still`): the
        queue head's prefetch deadline under ``timeout`` while it waits for its own
        prefetch and a running slot is free (at that step :meth:`L3Prefetcher.ready`
        lets it go); None when no time does. A simulator folding steady decode steps
        ends them before it."""
        l3 = self.l3
        if l3 is None or not l3.times_out or not self.waiting:
            return None
        head = self.waiting[0]
        if (head.status is not _PREFETCHING or head.prefetch_done
                or len(self.running) >= self.cfg.max_running_requests):
            return None
        return l3.deadline(head)

    def fold_decode(self, steps: int) -> tuple[BatchPlan, BatchPlan | None]:
        """Apply ``steps`` (>= 1) steps of a steady decode pipeline (:meth:`steady_decode`
        said at least ``steps``) as if :meth:`step` had been called ``steps`` times, each
        with the completion of the older batch in flight and nothing else: every request
        gains ``steps`` tokens planned (and done). The cache-only plans in flight complete
        in the first of those steps, with the older batch (a runtime runs them behind it,
        and its caller saw their completions come with its). Returns the two plans then in
        flight (the newer is None when no request has a token left to plan); the runtime
        prepares them as it would have, the older completes next."""
        if steps < 1:
            raise ValueError(f"fold_decode needs >= 1 step, got {steps}")
        for bid in sorted(self.plans.inflight):
            self.plans.complete(bid)
        for st in self.running:
            st.decode_planned += steps - 2
        self.plans.skip_batches(steps - 2)
        older = self._next_plan()
        assert older is not None, "fold_decode past the last planned token"
        return older, self._next_plan()

    def records(self) -> list[dict]:
        return [st.record() for st in sorted(self.requests.values(), key=lambda s: s.rid)]

    def diagnose(self) -> str:
        """Why the requests not done are stuck, for a stall report."""
        lines = [f"{len(self.waiting)} waiting, {len(self.running)} running, "
                 f"{len(self.plans.inflight)} plans in flight; L1 free "
                 f"{self.kv.budget.device_free()} of {self.kv.budget.device_total} pages, "
                 f"L2 free {self.kv.budget.host_free()} of {self.kv.budget.host_total}"]
        if self.waiting:
            st = self.waiting[0]
            lines.append(f"queue head: request {st.rid} ({st.status.value}) needs "
                         f"{self.kv.footprint(st)} L1 pages beyond its cached prefix")
        lines.append(self.kv.describe_l1())
        try:  # a stall is often a leak in the tree's accounting: name it
            check_tree(self.tree)
        except TreeInvariantError as e:
            lines.append(f"tree invariant broken (a bug, not a capacity limit): {e}")
        return "; ".join(lines)

    # -- arrivals and admission ------------------------------------------------------
    def _arrive(self, req: Request) -> None:
        st = RequestState(req, page_keys(req.tokens, self.page), self.replica)
        if self.kv.l3:
            st.hashes = l3_page_keys(req.tokens, st.pages, self.page, self.kv.key_scheme,
                                     self.kv.chain_ids)
        self.requests[req.rid] = st
        reason = self._never_servable(st)
        if reason is None:
            self.waiting.append(st)
            if self.l3 is not None:
                self.l3.queued(st)
            return
        st.status, st.rejected = Status.REJECTED, reason
        self.kv.log(Reject(st.rid, reason.split(":", 1)[0]))
        self._rejected.append(st.rid)
        st.forget()

    def _never_servable(self, st: RequestState) -> str | None:
        if self.cfg.max_running_requests <= 0:
            return "no_running_slots: scheduler.max_running_requests is 0, no request can run"
        if self.components is not None:
            return self.components.never_fits(st)
        return self.kv.never_fits(st)

    def _admit(self, now: float) -> None:
        """Admit waiting requests FIFO while the head may go (module doc).
        :meth:`L3Prefetcher.on_arrivals` is skipped with no request undecided (it walks
        only those: it would do nothing), and :meth:`L3Prefetcher.ready` for a head that
        waits for its own prefetch under ``wait_complete`` (``waits_own``): its first test,
        a no that changes nothing, made here (one call per blocked step saved)."""
        l3 = self.l3
        if l3 is not None and l3.undecided:
            l3.on_arrivals(now)
        waiting, running = self.waiting, self.running
        while waiting and len(running) < self.cfg.max_running_requests:
            st = waiting[0]
            if st.req.arrival > now:
                break
            if l3 is not None and (
                    (st.status is _PREFETCHING and not st.prefetch_done and l3.waits_own)
                    or not l3.ready(st, now)):
                break  # the first test is ready()'s own short no, without the call
            ok = (self.components.start(st) if self.components is not None
                  else self.kv.admit(st))
            if not ok:
                break
            self.waiting.popleft()
            st.status, st.admitted = Status.RUNNING, now
            self.running.append(st)
            if st.prompt_len > st.prefix_tokens:
                self._prefilling.append(st)

    # -- planning --------------------------------------------------------------------
    def _next_plan(self) -> BatchPlan | None:
        budget = self.cfg.chunked_prefill_size
        slices = []
        for st in self._prefilling:  # the running requests a prefill pass may plan
            left = st.prompt_len - st.prefix_tokens - st.prefill_planned
            if left <= 0 or budget <= 0 or (st.prefill_planned and st.handle is None):
                continue
            chunk = min(left, budget)
            pos = st.prefix_tokens + st.prefill_planned
            ckpt = False
            if self.components is not None:
                chunk, ckpt = self.components.cut(st, pos, chunk)
            budget -= chunk
            first = st.prefill_planned == 0
            last = chunk == left
            slices.append(_request_slice(
                st.rid, _PREFILL, st.prefix_tokens + st.prefill_planned, chunk,
                request=None if first else st.handle,
                attach=st.attach if first else (),
                loads=tuple(_load_intent(n.host[_FULL]) for n in st.load_nodes)
                if first else (),
                finishes=last and st.output_len <= 1, checkpoint=ckpt))
            st.prefill_planned += chunk
        if slices:
            self._prefilling = [st for st in self._prefilling
                                if st.prefill_planned < st.prompt_len - st.prefix_tokens]
        else:
            add, twin, cls, decode = slices.append, _SliceTwin, RequestSlice, _DECODE
            # a running request outside _prefilling has its whole prompt planned (it
            # leaves the list once planned, and its prefix is fixed at admission): with
            # the list empty, no request needs the test
            prefilling = bool(self._prefilling)
            for st in self.running:
                last = st.output_len - 1
                planned = st.decode_planned
                handle = st.handle
                if (planned >= last or handle is None or (
                        prefilling and st.prefill_planned < st.prompt_len - st.prefix_tokens)):
                    continue
                st.decode_planned = planned = planned + 1
                # decode_slice(st.rid, st.prompt_len + planned - 1, handle, planned >= last)
                # in line (one call per running request per decode step saved)
                s = twin()
                s.rid = st.rid
                s.phase = decode
                s.context_tokens = st.prompt_len + planned - 1
                s.new_tokens = 1
                s.request = handle
                s.attach = ()
                s.loads = ()
                s.finishes = planned >= last
                s.checkpoint = False
                s.__class__ = cls
                add(s)
        if not slices:
            return None
        return self.plans.build(tuple(slices))

    # -- completions -----------------------------------------------------------------
    def _batch_done(self, c: BatchCompletion) -> list[int]:
        plan = self.plans.complete(c.batch_id)
        done = []
        requests, prefill = self.requests, _PREFILL
        slices = plan.slices
        if slices and slices[0].phase is _DECODE:  # a decode plan: every slice decodes
            for sl in slices:  # a decode step changes nothing but a request it finishes
                if sl.finishes:
                    self._finish(requests[sl.rid], c.end)
                    done.append(sl.rid)
            return done
        for sl in slices:
            st = requests[sl.rid]
            if sl.phase is prefill:
                st.prefill_done += sl.new_tokens
                if sl.loads or sl.attach:  # hybrid state loads sit in attach
                    self.kv.loads_read(st)
                if sl.checkpoint and self.components is not None:  # a chunk end's window
                    node = self.components.chunk_cached(st, sl)
                    self.kv.relock(st, node)
                    if self.components.tiers is not None:
                        self.components.tiers.write_through(st, node)
                if st.prefill_done == st.to_prefill:
                    st.first_token = c.end
                    if self.components is not None:
                        node = self.components.cache_prompt(st)
                        self.kv.relock(st, node)
                        if self.components.tiers is not None:
                            self.components.tiers.write_through(st, node)
                    else:
                        self.kv.cache_prompt(st)
            if sl.finishes:
                self._finish(st, c.end)
                done.append(st.rid)
        return done

    def _finish(self, st: RequestState, now: float) -> None:
        keep = self.components.finish(st) if self.components is not None else None
        self.kv.finish(st, keep)
        st.finish, st.status = now, _DONE
        self.running.remove(st)
        self.finished.append(st)
        if self.l3 is None or st.prefetch_job not in self.l3.jobs:
            st.forget()  # else the prefetch's completion still inserts by them



def _same_decode(a: BatchPlan, b: BatchPlan) -> bool:
    """Both plans are decode steps of the same requests, in the same order (a generator
    over the pairs: Python 3.11 reads slot attributes faster than attrgetter's C calls)."""
    decode = Phase.DECODE
    return len(a.slices) == len(b.slices) and all(
        x.rid == y.rid and x.phase is decode and y.phase is decode
        for x, y in zip(a.slices, b.slices, strict=True))
