"""PlanBuilder: every intent emitted between two plans goes into the next one, once, in
order, whatever kind it is; a plan built with nothing pending carries no intent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hicache.kvcache.plans import PlanBuilder
from hicache.runtime.handles import CacheExtentRef, PageRun, RequestRuntimeHandle, Tier
from hicache.runtime.interface import (
    BackupIntent,
    Phase,
    PrefetchIntent,
    Release,
    RequestSlice,
    StoreIntent,
)

KINDS = ("backups", "stores", "prefetches", "frees", "releases")


def ext(first: int) -> CacheExtentRef:
    return CacheExtentRef("r", 0, Tier.DEVICE, (PageRun(first, 1),))


def emit(sink: PlanBuilder, kind: str, n: int) -> object:
    """Emit one intent of ``kind`` (``n`` tells them apart) and return it."""
    if kind == "backups":
        intent = BackupIntent(ext(n), n)
        sink.backup(intent)
    elif kind == "stores":
        intent = StoreIntent(ext(n), (n,), n)
        sink.store(intent)
    elif kind == "prefetches":
        intent = PrefetchIntent((n,), 1, 1, n)
        sink.prefetch(intent)
    elif kind == "frees":
        intent = ext(n)
        sink.free(intent)
    else:
        intent = Release(RequestRuntimeHandle("r", n, 0))
        sink.release(intent)
    return intent


def decode(rid: int) -> RequestSlice:
    return RequestSlice(rid, Phase.DECODE, 10, 1)


# each step: the intents (kinds) emitted before a plan, and whether it computes
steps = st.lists(st.tuples(st.lists(st.sampled_from(KINDS), max_size=6), st.booleans()),
                 min_size=1, max_size=8)


@given(steps)
def test_each_plan_carries_exactly_the_intents_emitted_since_the_last(script):
    sink = PlanBuilder()
    plans, expected, n = [], [], 0
    for kinds, computes in script:
        want: dict[str, list] = {k: [] for k in KINDS}
        for kind in kinds:
            n += 1
            want[kind].append(emit(sink, kind, n))
        assert sink.has_pending == bool(kinds)
        plan = sink.build((decode(n),) if computes else ())
        plans.append(plan)
        expected.append({k: tuple(v) for k, v in want.items()})
        assert not sink.has_pending
    # checked at the end: intents emitted after a plan never reach it (no shared list)
    for plan, want in zip(plans, expected, strict=True):
        assert {k: getattr(plan, k) for k in KINDS} == want
        assert all(type(getattr(plan, k)) is tuple for k in KINDS)
    computed = [p.batch_id for p in plans if p.slices]
    assert computed == list(range(1, len(computed) + 1))
    assert [p.batch_id for p in plans if not p.slices] == list(range(-1, -len(plans) +
                                                                      len(computed) - 1, -1))
