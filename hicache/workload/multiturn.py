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

from hicache.workload.closed_loop import ClosedLoopWorkload
from hicache.workload.conversation import Conversation
from hicache.workload.params import (
    LengthSpec,
    bool_param,
    draw_length,
    float_param,
    int_param,
    length_param,
    rate_param,
)
from hicache.workload.request import Request


@dataclass(frozen=True)
class MultiturnConfig:
    num_clients: int = 256
    num_rounds: int = 5
    request_length: LengthSpec = 512  # new question tokens per turn: int or [lo, hi]
    output_length: LengthSpec = 64
    request_rate: float = 1.0  # first turns, req/s; inf = all at 0
    max_parallel: int = 128
    round_barrier: bool = False
    think_time: float = 0.0  # seconds between a turn's finish and the next turn's readiness
    system_prompt_length: int = 0  # shared by all clients
    sessions: bool = False  # tag requests with session_id; close it after the last round

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "num_clients", int_param("num_clients", self.num_clients, 1))
        s(self, "num_rounds", int_param("num_rounds", self.num_rounds, 1))
        s(self, "request_length", length_param("request_length", self.request_length))
        s(self, "output_length", length_param("output_length", self.output_length))
        s(self, "request_rate", rate_param("request_rate", self.request_rate))
        s(self, "max_parallel", int_param("max_parallel", self.max_parallel, 1))
        s(self, "round_barrier", bool_param("round_barrier", self.round_barrier))
        s(self, "think_time", float_param("think_time", self.think_time))
        s(self, "system_prompt_length", int_param("system_prompt_length",
                                                  self.system_prompt_length, 0))
        s(self, "sessions", bool_param("sessions", self.sessions))


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
