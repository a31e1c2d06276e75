"""What a workload hands the scheduler: requests, and follow-ups when requests finish.

A workload is a synchronous state machine like the scheduler (no clock, no simpy)::

    wl = make_workload(spec, seed)
    pending = wl.start()                 # requests whose arrival is known up front
    ... when rid finishes at time now:
    pending += wl.on_finished(rid, now)  # e.g. the client's next turn, arrival >= now

Token ids: ``Request.tokens`` is any ``Sequence[int]`` supporting ``len`` and slicing.
Long multi-turn conversations share one growing buffer (:class:`TokenView`) so that
N turns of a conversation cost O(final length) memory, not O(N * length).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, overload


class TokenView(Sequence[int]):
    """The first ``length`` tokens of a shared append-only ``array('q')`` buffer."""

    __slots__ = ("_buf", "_len")

    def __init__(self, buf: array, length: int) -> None:
        if length > len(buf):
            raise ValueError(f"view of {length} tokens over a buffer of {len(buf)}")
        self._buf = buf
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            return self._buf[start:stop:step]
        if not -self._len <= i < self._len:
            raise IndexError(i)
        return self._buf[i % self._len]


@dataclass(frozen=True, slots=True)
class Request:
    """One request. ``arrival`` is seconds from the run's start."""

    rid: int
    arrival: float
    tokens: Sequence[int]
    output_len: int
    session_id: str | None = None
    client: int = -1
    round: int = -1
    close_session: bool = False  # close ``session_id`` when this request finishes
    # prompt + generated output, when the workload knows the output (conversations do):
    # lets the cache keep the output's KV for the next turn, as SGLang does
    full_tokens: Sequence[int] | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.tokens)


class Workload(Protocol):
    def start(self) -> list[Request]: ...

    def on_finished(self, rid: int, now: float) -> list[Request]: ...
