"""Machinery shared by the open-loop workloads (long context, shared prefix, traces).

Invariant: an open-loop workload knows every request up front. :meth:`start` returns all
of them, exactly once (a second call raises ``RuntimeError``); :meth:`on_finished` never
adds any. :func:`prefixed_request` builds a "shared prefix + fresh tokens" prompt with a
fixed draw order (own tokens, then the output length) so that seeds stay reproducible.
"""

from __future__ import annotations

import random
from array import array
from typing import Any

from hicache.workload.params import draw_length
from hicache.workload.request import Request
from hicache.workload.tokens import ConcatTokens, draw_tokens


class OpenLoopWorkload:
    """Base: ``config``, ``_rng = Random(seed)`` and the start-once protocol."""

    def __init__(self, config: Any, seed: int) -> None:
        self.config = config
        self._rng = random.Random(seed)
        self._started = False

    def start(self) -> list[Request]:
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True
        return self._requests()

    def _requests(self) -> list[Request]:
        """Every request of the run, in rid order (called once, by :meth:`start`)."""
        raise NotImplementedError

    def on_finished(self, rid: int, now: float) -> list[Request]:
        return []


def prefixed_request(rng: random.Random, rid: int, arrival: float, prefix: array | None,
                     namespace: int, own_tokens: int, output_length: tuple[int, int],
                     client: int = -1) -> Request:
    """Request whose prompt is ``prefix`` (shared, not copied; None: no prefix) followed by
    ``own_tokens`` fresh tokens of ``namespace``; draws the tokens, then the output length."""
    own = draw_tokens(rng, namespace, own_tokens)
    tokens = own if prefix is None else ConcatTokens(prefix, own)
    return Request(rid=rid, arrival=arrival, tokens=tokens,
                   output_len=draw_length(rng, output_length), client=client)
