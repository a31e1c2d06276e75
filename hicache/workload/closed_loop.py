"""Machinery shared by the closed-loop conversation workloads (multi-turn chat, agents).

Invariants: units (chat clients or agent sessions) ``0..n-1`` become ready at Poisson times
drawn from ``Random(seed)`` and wait in one :class:`AdmissionQueue`; unit ``i`` owns its
own ``Random(f"{seed}:{label}:{i}")`` and a :class:`Conversation` in token namespace
``i + 1`` that starts with the shared system prompt (namespace 0, drawn from
``Random(f"{seed}:system")``). Each turn draws its output length after its new-token
count, so prompts depend only on the seed, never on completion order. rids count from 0
in issue order; ``_inflight`` maps each unfinished rid to its unit.
"""

from __future__ import annotations

import random
from array import array
from typing import Any

from hicache.workload.admission import AdmissionQueue
from hicache.workload.conversation import Conversation
from hicache.workload.params import draw_length, poisson_arrivals
from hicache.workload.request import Request
from hicache.workload.tokens import draw_tokens


class ClosedLoopWorkload:
    """Base; subclasses give :meth:`_release` and :meth:`on_finished`.

    ``config`` needs ``system_prompt_length`` and ``output_length`` (a ``(lo, hi)`` spec).
    """

    def __init__(self, config: Any, seed: int, limit: int) -> None:
        self.config = config
        self.seed = seed
        self._rng = random.Random(seed)
        self._system = draw_tokens(
            random.Random(f"{seed}:system"), 0, config.system_prompt_length
        )
        self._queue: AdmissionQueue[int] = AdmissionQueue(limit)
        self._inflight: dict[int, int] = {}  # rid -> unit
        self._next_rid = 0
        self._started = False

    def _start(self, units: int, rate: float) -> list[Request]:
        """Queue ``units`` units at Poisson times of ``rate``; release what fits at 0."""
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True
        for unit, t in enumerate(poisson_arrivals(self._rng, units, rate)):
            self._queue.push(t, unit)
        return self._release(0.0)

    def _release(self, now: float) -> list[Request]:
        raise NotImplementedError

    def _open(self, label: str, unit: int, prefix: array | None = None
              ) -> tuple[Conversation, random.Random]:
        """Unit ``unit``'s conversation (starting with ``prefix``, default the system
        prompt) and its own random stream (see module invariant)."""
        rng = random.Random(f"{self.seed}:{label}:{unit}")
        return Conversation(rng, unit + 1, self._system if prefix is None else prefix), rng

    def _turn(self, unit: int, conv: Conversation, rng: random.Random, arrival: float,
              new_tokens: int, *, session_id: str | None, round: int,
              close_session: bool, dropped: int = 0) -> Request:
        """The next turn of ``conv``: ``new_tokens`` fresh input tokens, then
        ``dropped`` tokens the next prompt does not carry (reasoning) and an output of a
        length drawn from ``config.output_length``; registers a new rid."""
        output = draw_length(rng, self.config.output_length) + dropped
        prompt = conv.turn(new_tokens, output, dropped)
        rid = self._next_rid
        self._next_rid += 1
        self._inflight[rid] = unit
        return Request(rid=rid, arrival=arrival, tokens=prompt, output_len=output,
                       session_id=session_id, client=unit, round=round,
                       close_session=close_session,
                       full_tokens=conv.with_output(prompt, output))
