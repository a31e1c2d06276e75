"""RequestState: a slotted object whose copies of the (frozen) request's rid, prompt and
output lengths equal the request's, with the fields every planning pass reads first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from hicache.kvcache.state import RequestState
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

PAGE = 4
# read per running request per planned batch (Scheduler._next_plan, prepared, _batch_done)
HOT = ("req", "rid", "prompt_len", "output_len", "status", "prefix_tokens", "prefill_planned",
       "decode_planned", "handle", "kv")


@given(rid=hs.integers(0, 10**6), prompt=hs.integers(0, 40), output=hs.integers(1, 50),
       replica=hs.integers(0, 3))
def test_copies_are_the_requests(rid: int, prompt: int, output: int, replica: int) -> None:
    tokens = list(range(prompt))
    st = RequestState(Request(rid, 0.5, tokens, output), page_keys(tokens, PAGE), replica)
    assert (st.rid, st.prompt_len, st.output_len) == (rid, prompt, output)
    assert (st.replica, st.decode_planned, st.hashes) == (replica, 0, [])
    assert st.record()["output_tokens"] == output


def test_slotted_with_the_hot_fields_first() -> None:
    st = RequestState(Request(1, 0.0, [1, 2, 3, 4], 2), [b"k"])
    assert not hasattr(st, "__dict__")
    with pytest.raises(AttributeError):
        st.not_a_field = 1  # type: ignore[attr-defined]
    # the first 14 slots: 16 + 14 * 8 = 128 bytes, two cache lines
    assert set(HOT) <= set(RequestState.__slots__[:14])


def test_positional_arguments_unchanged() -> None:
    """Callers pass (req, pages, replica) by position; the copied fields take none."""
    req = Request(7, 0.0, [1, 2], 3)
    st = RequestState(req, [], 2)
    assert (st.req, st.pages, st.replica) == (req, [], 2)
    assert RequestState.__match_args__[:3] == ("req", "pages", "replica")
