"""PageBudget's free counts read the tree's residency count in line: the same numbers as
their definitions (limit less used; L2 total less held less reserved), shared or not."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from hicache.kvcache.budget import PageBudget
from hicache.runtime.handles import Kind, Tier


@given(l1=st.integers(0, 50), l2=st.integers(0, 50), own=st.integers(0, 50),
       loads=st.integers(0, 20), reserved=st.integers(0, 20), limit=st.none() | st.integers(0, 90),
       swa=st.integers(0, 9))
def test_free_counts_are_their_definitions(l1, l2, own, loads, reserved, limit, swa) -> None:
    held = {(Tier.DEVICE, Kind.FULL): l1, (Tier.HOST, Kind.FULL): l2,
            (Tier.DEVICE, Kind.SWA): swa, (Tier.HOST, Kind.SWA): swa}
    held = {k: v for k, v in held.items() if v}  # a count the tree never held is absent
    residency = SimpleNamespace(held=held)
    tree = SimpleNamespace(residency=residency,
                           held_pages=lambda tier, kind=Kind.FULL: held.get((tier, kind), 0))
    b = PageBudget(tree, 80, 60)  # type: ignore[arg-type]
    b.own, b.loads_pending, b.host_reserved = own, loads, reserved
    if limit is not None:
        b.share = SimpleNamespace(limit=lambda: limit)  # type: ignore[assignment]
    assert b.device_free() == b.device_limit() - b.device_used()
    assert b.device_free() == min(80, 80 if limit is None else limit) - l1 - own - loads
    assert b.host_free() == 60 - l2 - reserved
    assert b.free(Tier.DEVICE) == b.device_free() and b.free(Tier.HOST) == b.host_free()
