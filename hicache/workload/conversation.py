"""One growing conversation (multi-turn client or agent session).

Invariant: the conversation owns one append-only ``array('q')`` buffer. :meth:`turn`
appends the new input tokens, takes the prompt as a :class:`TokenView` of the whole
buffer, then appends the turn's output tokens, so turn k+1's prompt starts with turn k's
prompt followed by turn k's output. Memory is O(conversation length).
"""

from __future__ import annotations

import random
from array import array

from hicache.workload.request import BufferPages, TokenView
from hicache.workload.tokens import draw_tokens


class Conversation:
    __slots__ = ("_buf", "_rng", "_ns", "turns", "_pages")

    def __init__(self, rng: random.Random, namespace: int, prefix: array | None = None) -> None:
        self._buf = array("q", prefix) if prefix is not None else array("q")
        self._rng = rng
        self._ns = namespace
        self.turns = 0
        self._pages = BufferPages(self._buf)  # keys and hashes, shared by every turn

    def __len__(self) -> int:
        return len(self._buf)

    def turn(self, new_tokens: int, output_len: int) -> TokenView:
        """Prompt of the next turn (``new_tokens`` fresh tokens); its output is pre-drawn."""
        self._buf.extend(draw_tokens(self._rng, self._ns, new_tokens))
        prompt = TokenView(self._buf, len(self._buf), self._pages)
        self._buf.extend(draw_tokens(self._rng, self._ns, output_len))
        self.turns += 1
        return prompt

    def with_output(self, prompt: TokenView, output_len: int) -> TokenView:
        """``prompt`` followed by the output drawn for it (what the model's KV will hold)."""
        return TokenView(self._buf, len(prompt) + output_len, self._pages)
