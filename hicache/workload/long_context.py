"""Single-round long-prompt requests, optionally sharing a document prefix.

``count`` requests arrive at Poisson times (``request_rate``). Each prompt has
``prompt_length`` tokens (int or [lo, hi]). With ``num_documents > 0`` each request picks
one of ``num_documents`` shared documents of ``document_length`` tokens uniformly at
random; its prompt = that document (shared array, not copied) + its own fresh tokens.
Token namespaces: document d -> d, request i -> num_documents + i (disjoint).
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache.workload.open_loop import OpenLoopWorkload, prefixed_request
from hicache.workload.params import (
    LengthSpec,
    draw_length,
    int_param,
    length_param,
    poisson_arrivals,
    rate_param,
)
from hicache.workload.request import Request
from hicache.workload.tokens import draw_tokens


@dataclass(frozen=True)
class LongContextConfig:
    count: int = 32
    prompt_length: LengthSpec = 32768  # total prompt tokens, document included
    output_length: LengthSpec = 64
    request_rate: float = 1.0
    num_documents: int = 0  # 0: no shared prefix
    document_length: int = 0

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "count", int_param("count", self.count, 1))
        s(self, "prompt_length", length_param("prompt_length", self.prompt_length))
        s(self, "output_length", length_param("output_length", self.output_length))
        s(self, "request_rate", rate_param("request_rate", self.request_rate))
        s(self, "num_documents", int_param("num_documents", self.num_documents, 0))
        s(self, "document_length", int_param("document_length", self.document_length, 0))
        if self.num_documents and self.prompt_length[0] <= self.document_length:
            raise ValueError(
                f"key 'prompt_length': must exceed document_length={self.document_length} "
                f"(each prompt adds fresh tokens after its document), got {self.prompt_length}"
            )


class LongContextWorkload(OpenLoopWorkload):
    """Open-loop: everything is returned by :meth:`start`; no follow-ups."""

    def _requests(self) -> list[Request]:
        cfg, rng = self.config, self._rng
        docs = [draw_tokens(rng, d, cfg.document_length) for d in range(cfg.num_documents)]
        arrivals = poisson_arrivals(rng, cfg.count, cfg.request_rate)
        out = []
        for i, t in enumerate(arrivals):
            length = draw_length(rng, cfg.prompt_length)
            doc = docs[rng.randrange(len(docs))] if docs else None
            own = length - (len(doc) if doc is not None else 0)
            out.append(prefixed_request(rng, i, t, doc, cfg.num_documents + i, own,
                                        cfg.output_length))
        return out
