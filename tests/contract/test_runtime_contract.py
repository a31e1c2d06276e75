"""One contract, every runtime: SimRuntime and TorchRuntime (CPU) pass the same tests.

The contract (hicache/runtime/interface.py): prepare_batch is atomic; one CapacityError
type; stale handles (another runtime, another generation, a closed row) are refused with
StaleHandleError; each page is freed exactly once; completions come in the stated order;
handles are compared by value (a handle that crossed a process boundary still works); the
wait for completions is part of the interface. Only the state inspection (free pages,
open rows) differs per runtime, in the harness below.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
import simpy

from hicache.runtime.handles import CacheExtentRef, Kind, StaleHandleError, Tier
from hicache.runtime.interface import (
    BackupIntent,
    BatchCompletion,
    BatchPlan,
    CapacityError,
    Completion,
    Phase,
    PreparedBatchHandle,
    Release,
    RequestSlice,
    RuntimeInterface,
    TransferCompletion,
    TransferKind,
)

PAGE = 4
PAGES = 32  # device and host pages of every runtime under test


@dataclass
class Harness:
    rt: RuntimeInterface
    free: Callable[[Tier], int]  # free pages of pool "full" of a tier
    open_rows: Callable[[], int]
    patience: float  # how long to wait for completions (runtime seconds)

    def state(self) -> tuple[int, int, int]:
        return self.free(Tier.DEVICE), self.free(Tier.HOST), self.open_rows()

    def run(self, plan: BatchPlan) -> PreparedBatchHandle:
        handle = self.rt.prepare_batch(plan)
        self.rt.execute_batch(handle)
        return handle

    def until(self, done: Callable[[list[Completion]], bool]) -> list[Completion]:
        """Completions through the interface's wait until ``done(all so far)``."""
        got: list[Completion] = []
        deadline = time.monotonic() + 30.0
        while not done(got):
            assert time.monotonic() < deadline, f"completions did not come: {got}"
            got += self.rt.wait(self.patience)
        return got


def sim_harness() -> Harness:
    from sim.hardware.profile import load_profile
    from sim.l3 import L3Store
    from sim.runtime import SimRuntime

    env = simpy.Environment()
    profile = load_profile("h100-sxm")
    rt = SimRuntime(env, profile=profile, model="llama-3-8b", page_size=PAGE,
                    device_pages={Kind.FULL: PAGES}, host_pages={Kind.FULL: PAGES},
                    l3=L3Store.mooncake(env, profile.mooncake), runtime_id="rt")
    return Harness(rt, lambda t: rt.tier(t)[Kind.FULL].free_count, rt.open_requests, 1.0)


def torch_harness() -> Harness:
    pytest.importorskip("torch")
    from gpu_backend.l3_protocol import MemoryL3
    from gpu_backend.runtime import TorchRuntime
    from gpu_backend.shapes import ModelShape

    rt = TorchRuntime(ModelShape.tiny(), page_size=PAGE, device_pages={Kind.FULL: PAGES},
                      host_pages={Kind.FULL: PAGES}, l3=MemoryL3(), runtime_id="rt")
    allocs = {Tier.DEVICE: rt.dev_alloc, Tier.HOST: rt.host_alloc}
    return Harness(rt, lambda t: allocs[t].num_free, lambda: len(rt.table), 0.5)


def _sim_free(rt, tier: Tier) -> int:  # noqa: ANN001 - probes run in the runtime process
    return rt.tier(tier)[Kind.FULL].free_count


def _sim_open_rows(rt) -> int:  # noqa: ANN001
    return rt.open_requests()


def process_harness() -> Harness:
    """The simulated runtime in a process of its own, behind ipc.ProcessGPURuntime: every
    message crosses pickled, every error comes back with its type."""
    from functools import partial

    from ipc import ProcessGPURuntime
    from sim.process import standalone_sim_runtime

    rt = ProcessGPURuntime(partial(standalone_sim_runtime, profile="h100-sxm",
                                   model="llama-3-8b", page_size=PAGE,
                                   device_pages={Kind.FULL: PAGES}, host_pages={Kind.FULL: PAGES},
                                   l3="mooncake", runtime_id="rt"))
    return Harness(rt, lambda t: rt.apply(_sim_free, t), lambda: rt.apply(_sim_open_rows),
                   1.0)


HARNESSES = {"sim": sim_harness, "torch": torch_harness, "process": process_harness}


@pytest.fixture(params=sorted(HARNESSES))
def h(request) -> Harness:  # noqa: ANN001
    harness = HARNESSES[request.param]()
    yield harness
    close = getattr(harness.rt, "close", None)
    if close is not None:
        close()


def batches(*ids: int) -> Callable[[list[Completion]], bool]:
    return lambda got: {c.batch_id for c in got if isinstance(c, BatchCompletion)} >= set(ids)


def prefill(rid: int, tokens: int, context: int = 0, **kw) -> RequestSlice:
    return RequestSlice(rid, Phase.PREFILL, context, tokens, **kw)


def cached_pages(h: Harness, rid: int = 1, pages: int = 2, batch: int = 1) -> CacheExtentRef:
    """Prefill ``pages`` pages for ``rid`` and release it keeping them (as a tree would)."""
    p = h.run(BatchPlan(batch, slices=(prefill(rid, pages * PAGE),)))
    h.until(batches(batch))
    kv = p.slices[0].kv
    h.run(BatchPlan(batch + 1, releases=(Release(p.slices[0].request, keep=kv),)))
    h.until(batches(batch + 1))
    return kv


def test_both_runtimes_implement_the_interface(h: Harness) -> None:
    assert isinstance(h.rt, RuntimeInterface)
    info = h.rt.info()
    assert (info.page_size, info.device_pages, info.host_pages) == (
        PAGE, {Kind.FULL: PAGES}, {Kind.FULL: PAGES})
    assert h.rt.wait(0.01) == []  # nothing in flight: the wait times out empty
    assert h.rt.wait(None) == []  # ... and without a timeout it does not hang
    h.run(BatchPlan(1, slices=(prefill(1, PAGE),)))
    got = h.rt.wait(None)  # the first completion ends the wait
    assert [c.batch_id for c in got] == [1]


def test_one_capacity_error_type_for_every_runtime() -> None:
    from gpu_backend.pools import CapacityError as TorchCapacityError
    from sim.pools import CapacityError as SimCapacityError

    assert SimCapacityError is CapacityError is TorchCapacityError


def test_a_plan_beyond_capacity_changes_nothing(h: Harness) -> None:
    kv = cached_pages(h)
    before = h.state()
    too_big = BatchPlan(3, frees=(kv,), slices=(prefill(2, (PAGES + 3) * PAGE),))
    with pytest.raises(CapacityError, match="needs"):
        h.rt.prepare_batch(too_big)
    assert h.state() == before  # no row opened, no page allocated, the free not applied
    h.run(BatchPlan(3, frees=(kv,)))  # the same id and the same free are still fresh
    h.until(batches(3))
    # and nothing leaked: one request can take every device page
    whole = h.run(BatchPlan(4, slices=(prefill(3, PAGES * PAGE),)))
    h.until(batches(4))
    assert whole.slices[0].kv.num_pages == PAGES and h.free(Tier.DEVICE) == 0


def test_too_many_host_pages_change_nothing(h: Harness) -> None:
    kv = cached_pages(h)
    before = h.state()
    plan = BatchPlan(3, slices=(prefill(2, 2 * PAGE),),
                     backups=tuple(BackupIntent(kv, job_id=j) for j in range(17)))
    with pytest.raises(CapacityError):
        h.rt.prepare_batch(plan)
    assert h.state() == before


def test_a_plan_may_not_free_what_its_own_copies_read(h: Harness) -> None:
    kv = cached_pages(h)
    before = h.state()
    with pytest.raises(ValueError, match="read"):
        h.rt.prepare_batch(BatchPlan(3, frees=(kv,), backups=(BackupIntent(kv, job_id=9),)))
    assert h.state() == before


def test_stale_handles_are_refused_and_change_nothing(h: Harness) -> None:
    p = h.run(BatchPlan(1, slices=(prefill(1, 2 * PAGE),)))
    h.until(batches(1))
    kv, req = p.slices[0].kv, p.slices[0].request
    before = h.state()
    foreign = replace(kv, runtime_id="another")
    older = replace(kv, generation=kv.generation + 1)
    for ext in (foreign, older):
        with pytest.raises(StaleHandleError):
            h.rt.prepare_batch(BatchPlan(2, frees=(ext,)))
        with pytest.raises(StaleHandleError):
            h.rt.prepare_batch(BatchPlan(2, slices=(prefill(5, PAGE, context=2 * PAGE,
                                                            attach=(ext,)),)))
    with pytest.raises(StaleHandleError):
        h.rt.execute_batch(replace(p, runtime_id="another"))
    assert h.state() == before
    h.run(BatchPlan(2, releases=(Release(req),)))
    h.until(batches(2))
    closed = RequestSlice(1, Phase.DECODE, 2 * PAGE, 1, request=req)
    with pytest.raises(StaleHandleError):  # the row was released: its handle is stale
        h.rt.prepare_batch(BatchPlan(3, slices=(closed,)))
    with pytest.raises(StaleHandleError):
        h.rt.prepare_batch(BatchPlan(3, releases=(Release(req),)))


def test_each_page_is_freed_exactly_once(h: Harness) -> None:
    kv = cached_pages(h)
    before = h.state()
    with pytest.raises(ValueError, match="twice"):
        h.rt.prepare_batch(BatchPlan(3, frees=(kv, kv.slice(0, 1))))
    assert h.state() == before
    p = h.run(BatchPlan(3, slices=(prefill(2, PAGE),)))
    h.until(batches(3))
    own = p.slices[0].kv
    before = h.state()
    with pytest.raises(ValueError, match="twice"):  # the release frees ``own`` itself
        h.rt.prepare_batch(BatchPlan(4, releases=(Release(p.slices[0].request),),
                                     frees=(own,)))
    assert h.state() == before
    h.run(BatchPlan(4, frees=(kv,), releases=(Release(p.slices[0].request),)))
    h.until(batches(4))
    assert h.free(Tier.DEVICE) == PAGES and h.open_rows() == 0
    with pytest.raises(ValueError):
        h.rt.prepare_batch(BatchPlan(5, frees=(kv,)))  # freed already


def test_completions_come_in_the_stated_order(h: Harness) -> None:
    first = h.run(BatchPlan(1, slices=(prefill(1, 3 * PAGE),)))
    kv = first.slices[0].kv
    h.run(BatchPlan(2, slices=(prefill(2, 2 * PAGE),), backups=(BackupIntent(kv, job_id=7),)))
    h.run(BatchPlan(3, slices=(prefill(3, PAGE),)))
    got = h.until(lambda g: batches(1, 2, 3)(g) and any(
        isinstance(c, TransferCompletion) and c.job_id == 7 for c in g))
    order = [c.batch_id for c in got if isinstance(c, BatchCompletion)]
    assert order == [1, 2, 3]
    backup = next(i for i, c in enumerate(got) if isinstance(c, TransferCompletion))
    assert got[backup].kind is TransferKind.BACKUP
    assert backup > next(i for i, c in enumerate(got)
                         if isinstance(c, BatchCompletion) and c.batch_id == 2)
    ends = [c.end for c in got]
    assert ends == sorted(ends)


def test_handles_are_compared_by_value_so_they_can_cross_a_process(h: Harness) -> None:
    prepared = h.rt.prepare_batch(BatchPlan(1, slices=(prefill(1, 2 * PAGE + 1),)))
    copy = pickle.loads(pickle.dumps(prepared))
    assert copy == prepared and copy is not prepared
    h.rt.execute_batch(copy)
    with pytest.raises(ValueError):
        h.rt.execute_batch(prepared)  # executed once already
    h.until(batches(1))
    req = pickle.loads(pickle.dumps(copy.slices[0].request))
    d = h.run(BatchPlan(2, slices=(RequestSlice(1, Phase.DECODE, 2 * PAGE + 1, 1,
                                                request=req, finishes=True),)))
    (done,) = [c for c in h.until(batches(2)) if isinstance(c, BatchCompletion)]
    assert done.finished == (1,) and d.slices[0].kv.num_pages == 3
