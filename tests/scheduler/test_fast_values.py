"""batch_plan, prepared_batch and the scheduler's step result (their slots set directly,
as decode_slice's) are the very values their constructors build: equal, hashing alike,
frozen, pickling alike, every field read back, in order (a setter bound to the wrong
field fails the per-field reads: each field gets a distinct value here)."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from hicache.runtime.handles import (
    CacheExtentRef,
    Kind,
    PageRun,
    RequestRuntimeHandle,
    Tier,
    coalesce,
    page_run,
)
from hicache.runtime.interface import (
    BackupIntent,
    BatchPlan,
    PrefetchIntent,
    PreparedBatchHandle,
    PreparedSlice,
    Release,
    StoreIntent,
    batch_plan,
    decode_slice,
    prepared_batch,
)
from hicache.scheduler.scheduler import StepResult, _result


def _ext(first: int, tier: Tier = Tier.DEVICE) -> CacheExtentRef:
    return CacheExtentRef("sim0", 1, tier, (PageRun(first, 2),), Kind.FULL)


def _same(fast: Any, ref: Any) -> None:
    assert type(fast) is type(ref)
    assert fast == ref and hash(fast) == hash(ref)
    for f in dataclasses.fields(ref):
        assert getattr(fast, f.name) == getattr(ref, f.name), f.name
    assert pickle.loads(pickle.dumps(fast)) == ref
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, dataclasses.fields(ref)[0].name, None)


def test_batch_plan_equals_the_constructor() -> None:
    h = RequestRuntimeHandle("sim0", 7, 1)
    args = (5, (decode_slice(1, 10, h, False),), (BackupIntent(_ext(0), 1),),
            (StoreIntent(_ext(4, Tier.HOST), ("a", "b"), 2),),
            (PrefetchIntent(("c",), 1, 1, 3),), (_ext(8),), (Release(h),))
    _same(batch_plan(*args), BatchPlan(*args))
    assert batch_plan(-1, (), (), (), (), (), ()) == BatchPlan(-1)


def test_prepared_batch_equals_the_constructor() -> None:
    h = RequestRuntimeHandle("sim0", 7, 1)
    args = ("sim0", 1, 5, (PreparedSlice(1, h, _ext(0), ()),), (_ext(2, Tier.HOST),))
    _same(prepared_batch(*args), PreparedBatchHandle(*args))


def test_a_step_result_equals_the_constructor() -> None:
    args = ((BatchPlan(3),), (1, 2), (4,))
    _same(_result(*args), StepResult(*args))
    assert _result(*args).ended == (1, 2, 4)


def test_page_run_equals_the_constructor_and_coalesce_still_refuses_a_negative_page() -> None:
    """page_run (pool pages: no re-check) is PageRun's value; coalesce builds its runs so
    and still refuses what PageRun refuses (a negative page)."""
    _same(page_run(7, 3), PageRun(7, 3))
    assert page_run(7, 3).pages() == range(7, 10)
    assert coalesce([4, 5, 6, 0, 9, 10]) == (PageRun(4, 3), PageRun(0, 1), PageRun(9, 2))
    assert all(type(r) is PageRun for r in coalesce([4, 5, 0]))
    with pytest.raises(ValueError, match=r"invalid PageRun\(-2, 2\)"):
        coalesce([3, -2, -1])
