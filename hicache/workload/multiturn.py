"""Multi-turn chat clients shaped like SGLang ``bench_multiturn``.

Each of ``num_clients`` clients holds one conversation of ``num_rounds`` turns; turn k's
prompt = system prompt + all earlier questions and outputs + a new question (see
:class:`Conversation`). First turns become ready at Poisson times (``request_rate``);
turn k+1 becomes ready ``think_time`` after turn k finishes (with ``round_barrier``:
after every client finished round k). At most ``max_parallel`` requests are outstanding;
a ready turn waits for a slot and then arrives at the time the slot frees.

Determinism: arrivals come from ``Random(seed)``; each client's tokens and lengths from
its own ``Random(f"{seed}:client:{c}")``, so prompts do not depend on completion order.
Token namespaces: system prompt 0, client c -> c + 1 (clients share only the system prompt).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from hicache.schema.plain import Plain
from hicache.schema.types import Bool, NonNegFloat, NonNegInt, PosInt
from hicache.workload.closed_loop import ClosedLoopWorkload
from hicache.workload.conversation import Conversation
from hicache.workload.params import WORKLOAD_CONFIG, Length, Rate, draw_length
from hicache.workload.request import Request


@dataclass(frozen=True)
class MultiturnConfig(Plain):
    __pydantic_config__ = WORKLOAD_CONFIG

    kind: Literal["multiturn"] = "multiturn"
    num_clients: PosInt = 256
    num_rounds: PosInt = 5
    request_length: Length() = 512  # new question tokens per turn: int or [lo, hi]
    output_length: Length() = 64
    request_rate: Rate = 1.0  # first turns, req/s; inf = all at 0
    max_parallel: PosInt = 128
    round_barrier: Bool = False
    think_time: NonNegFloat = 0.0  # seconds between a turn's finish and the next turn's readiness
    system_prompt_length: NonNegInt = 0  # shared by all clients
    sessions: Bool = False  # tag requests with session_id; close it after the last round


class MultiturnWorkload(ClosedLoopWorkload):
    """Workload state machine; see the module docstring for the invariants."""

    def __init__(self, config: MultiturnConfig, seed: int) -> None:
        super().__init__(config, seed, config.max_parallel)
        self._convs: dict[int, tuple[Conversation, random.Random]] = {}
        self._next_round = [0] * config.num_clients
        self._waiting: list[int] = []  # clients done with the current round (barrier)

    def start(self) -> list[Request]:
        return self._start(self.config.num_clients, self.config.request_rate)

    def on_finished(self, rid: int, now: float) -> list[Request]:
        client = self._inflight.pop(rid)  # KeyError: unknown or already finished
        self._queue.finished()
        cfg = self.config
        if self._next_round[client] >= cfg.num_rounds:
            self._convs.pop(client)  # conversation over: free its buffer
        elif cfg.round_barrier:
            self._waiting.append(client)
            # every client has the same number of rounds, so all are in this round
            if len(self._waiting) == cfg.num_clients:
                for c in sorted(self._waiting):
                    self._queue.push(now + cfg.think_time, c)
                self._waiting.clear()
        else:
            self._queue.push(now + cfg.think_time, client)
        return self._release(now)

    def _release(self, now: float) -> list[Request]:
        out = []
        cfg = self.config
        for arrival, client in self._queue.release(now):
            if client not in self._convs:
                self._convs[client] = self._open("client", client)
            conv, rng = self._convs[client]
            rnd = self._next_round[client]
            self._next_round[client] = rnd + 1
            out.append(self._turn(
                client, conv, rng, arrival, draw_length(rng, cfg.request_length),
                session_id=f"client-{client}" if cfg.sessions else None, round=rnd,
                close_session=cfg.sessions and rnd == cfg.num_rounds - 1,
            ))
        return out
