"""One growing conversation (multi-turn client or agent session).

Invariant: the conversation owns one append-only ``array('q')`` buffer. :meth:`turn`
appends the new input tokens, takes the prompt as a :class:`TokenView` of the whole
buffer, then appends the turn's output tokens, so turn k+1's prompt starts with turn k's
prompt followed by turn k's output. Memory is O(conversation length).

A turn with ``dropped`` tokens (a thinking model's reasoning, which the next prompt does
not carry) forks instead: its KV is the prompt followed by its whole output, held apart
(:class:`ForkedView`); the buffer goes on with the ``output - dropped`` tokens the next
prompt does carry (the tool call as the harness sends it back)::

    buffer:  ... prompt k | call k | tool result | ...      (turn k+1's prompt)
    KV k:    ... prompt k | reasoning k + call k             (a branch: never reused)
"""

from __future__ import annotations

import random
from array import array

from hicache.workload.request import BufferPages, ForkedView, TokenView
from hicache.workload.tokens import draw_tokens


class Conversation:
    __slots__ = ("_buf", "_rng", "_ns", "turns", "_pages", "_fork")

    def __init__(self, rng: random.Random, namespace: int, prefix: array | None = None) -> None:
        self._buf = array("q", prefix) if prefix is not None else array("q")
        self._rng = rng
        self._ns = namespace
        self.turns = 0
        self._pages = BufferPages(self._buf)  # keys and hashes, shared by every turn
        self._fork: ForkedView | None = None  # the last turn's KV when it forked

    def __len__(self) -> int:
        return len(self._buf)

    def turn(self, new_tokens: int, output_len: int, dropped: int = 0) -> TokenView:
        """Prompt of the next turn (``new_tokens`` fresh tokens); its output is pre-drawn.
        ``dropped``: how many of the output's tokens the next prompt does not carry (the
        turn forks; module doc)."""
        if not 0 <= dropped <= output_len:
            raise ValueError(f"dropped {dropped} of an output of {output_len} tokens")
        # the new tokens, the output (a fork's whole output, then the part the next prompt
        # carries) drawn with one draw: ``draw_tokens`` of a then b tokens gives the
        # tokens of one draw of a + b (its words come one by one from the stream)
        buf = self._buf
        if not dropped:
            buf.extend(draw_tokens(self._rng, self._ns, new_tokens + output_len))
            self._fork = None
            self.turns += 1
            return TokenView(buf, len(buf) - output_len, self._pages)
        kept = output_len - dropped
        drawn = draw_tokens(self._rng, self._ns, new_tokens + output_len + kept)
        buf.extend(drawn[:new_tokens])
        prompt = TokenView(buf, len(buf), self._pages)
        self._fork = ForkedView(prompt, drawn[new_tokens:new_tokens + output_len])
        buf.extend(drawn[new_tokens + output_len:])
        self.turns += 1
        return prompt

    def with_output(self, prompt: TokenView, output_len: int) -> TokenView | ForkedView:
        """``prompt`` (the last turn's) followed by the output drawn for it (what the
        model's KV will hold)."""
        if self._fork is not None:
            assert len(self._fork) == len(prompt) + output_len
            return self._fork
        return TokenView(self._buf, len(prompt) + output_len, self._pages)
