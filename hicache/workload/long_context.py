"""Single-round long-prompt requests, optionally sharing a document prefix.

``count`` requests arrive at Poisson times (``request_rate``). Each prompt has
``prompt_length`` tokens (int or [lo, hi]). With ``num_documents > 0`` each request picks
one of ``num_documents`` shared documents of ``document_length`` tokens uniformly at
random; its prompt = that document (shared array, not copied) + its own fresh tokens.
Token namespaces: document d -> d, request i -> num_documents + i (disjoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hicache.schema.plain import Plain
from hicache.schema.types import NonNegInt, PosInt
from hicache.workload.open_loop import OpenLoopWorkload, prefixed_request
from hicache.workload.params import WORKLOAD_CONFIG, Length, Rate, draw_length, poisson_arrivals
from hicache.workload.request import Request
from hicache.workload.tokens import draw_tokens


@dataclass(frozen=True)
class LongContextConfig(Plain):
    __pydantic_config__ = WORKLOAD_CONFIG

    kind: Literal["long_context"] = "long_context"
    count: PosInt = 32
    prompt_length: Length() = 32768  # total prompt tokens, document included
    output_length: Length() = 64
    request_rate: Rate = 1.0
    num_documents: NonNegInt = 0  # 0: no shared prefix
    document_length: NonNegInt = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_documents and self.prompt_length[0] <= self.document_length:
            raise ValueError(
                f"prompt_length: must exceed document_length={self.document_length} "
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
