"""Agent sessions: each session is a chain of tool-calling steps over a growing context.

``num_sessions`` sessions become ready at Poisson times (``session_rate``); at most
``max_sessions`` are in flight (started and not closed), later ones wait and start when
one closes. A session runs ``steps`` requests (int or [lo, hi]); step 0's prompt =
shared system prompt + ``task_length`` fresh tokens; step s+1's prompt = step s's prompt
+ step s's output + ``tool_output_length`` tokens (the tool result) and becomes ready
``tool_time`` seconds after step s finishes. Every request carries
``session_id = "agent-<i>"``, ``client = i`` and ``round = step``; the last step has
``close_session=True``. With ``reasoning_length`` (a thinking model), each step's output
is that many reasoning tokens and then the tool call; the next prompt carries the call, not
the reasoning (an assumption: DeepSeek's and Qwen3's chat templates drop the reasoning of
turns before the last user message, and mini-swe-agent, which SGLang's SWE-bench runs use,
returns each tool result as a user message), so each step's KV forks from the next prompt
at the end of its own prompt and its generated tokens are never reused. With
``repositories > 0`` (SWE-bench-like: many tasks per
repository), session i works on repository ``i % repositories`` and its step 0 prompt is
system prompt + that repository's shared context (``repository_length`` tokens, the same
tokens for every session of the repository) + task.

Determinism: arrivals from ``Random(seed)``; session i's draws from
``Random(f"{seed}:session:{i}")``; repository j's context from
``Random(f"{seed}:repository:{j}")``. Token namespaces: system prompt 0, session i ->
i + 1, repository j -> num_sessions + 1 + j.
"""

from __future__ import annotations

import dataclasses
import random
from array import array
from dataclasses import dataclass
from typing import Literal

from hicache.schema.plain import Plain
from hicache.schema.types import NonNegInt, PosInt
from hicache.workload.closed_loop import ClosedLoopWorkload
from hicache.workload.conversation import Conversation
from hicache.workload.params import (
    WORKLOAD_CONFIG,
    FloatRange,
    Length,
    Rate,
    draw_float,
    draw_length,
)
from hicache.workload.request import Request
from hicache.workload.tokens import draw_tokens


@dataclass(frozen=True)
class AgentConfig(Plain):
    __pydantic_config__ = WORKLOAD_CONFIG

    kind: Literal["agent"] = "agent"
    num_sessions: PosInt = 64
    max_sessions: PosInt = 16  # sessions in flight
    session_rate: Rate = 1.0  # session starts, per s; inf = all ready at 0
    steps: Length() = (4, 16)
    system_prompt_length: NonNegInt = 2048  # shared tool definitions / instructions
    task_length: Length() = 512
    tool_output_length: Length() = (64, 1024)
    output_length: Length() = (32, 256)  # the model's tool call
    # a thinking model's reasoning before each tool call, not carried into the next prompt
    # (module doc); 0: the whole output is carried
    reasoning_length: Length(0) = 0
    tool_time: FloatRange = 0.5  # seconds, number or [lo, hi]
    repositories: NonNegInt = 0  # shared repository contexts (0: none)
    repository_length: NonNegInt = 0  # tokens of one repository's context

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.repositories) != bool(self.repository_length):
            raise ValueError(f"repository_length: set both repositories and "
                             f"repository_length (or neither), got {self.repositories} "
                             f"and {self.repository_length}")


@dataclasses.dataclass(slots=True)
class _Session:
    conv: Conversation
    rng: random.Random
    steps: int
    step: int = 0


class AgentWorkload(ClosedLoopWorkload):
    """Workload state machine; see the module docstring for the invariants."""

    def __init__(self, config: AgentConfig, seed: int) -> None:
        super().__init__(config, seed, config.max_sessions)
        self._sessions: dict[int, _Session] = {}
        self._repos: dict[int, array] = {}  # repository -> system prompt + its context

    def start(self) -> list[Request]:
        return self._start(self.config.num_sessions, self.config.session_rate)

    def on_finished(self, rid: int, now: float) -> list[Request]:
        i = self._inflight.pop(rid)  # KeyError: unknown or already finished
        sess = self._sessions[i]
        if sess.step >= sess.steps:  # the closing step finished
            del self._sessions[i]
            self._queue.finished()
            return self._release(now)
        arrival = now + draw_float(sess.rng, self.config.tool_time)
        return [self._step(i, arrival, draw_length(sess.rng, self.config.tool_output_length))]

    def _release(self, now: float) -> list[Request]:
        out = []
        for arrival, i in self._queue.release(now):
            conv, rng = self._open("session", i, self._repository_prefix(i))
            steps = draw_length(rng, self.config.steps)
            self._sessions[i] = _Session(conv, rng, steps)
            out.append(self._step(i, arrival, draw_length(rng, self.config.task_length)))
        return out

    def _repository_prefix(self, i: int) -> array | None:
        """System prompt + session i's repository context (None without repositories)."""
        cfg = self.config
        if not cfg.repositories:
            return None
        j = i % cfg.repositories
        if j not in self._repos:
            rng = random.Random(f"{self.seed}:repository:{j}")
            ctx = draw_tokens(rng, cfg.num_sessions + 1 + j, cfg.repository_length)
            self._repos[j] = self._system + ctx
        return self._repos[j]

    def _step(self, i: int, arrival: float, new_tokens: int) -> Request:
        sess = self._sessions[i]
        sess.step += 1
        return self._turn(i, sess.conv, sess.rng, arrival, new_tokens,
                          session_id=f"agent-{i}", round=sess.step - 1,
                          close_session=sess.step == sess.steps,
                          dropped=draw_length(sess.rng, self.config.reasoning_length))
