"""Synthetic shared-prefix workload (like bench_serving's generated-shared-prefix).

``num_groups`` groups, each with one shared prefix of ``prefix_length`` tokens and
``requests_per_group`` requests; a request's prompt = its group's prefix (shared array)
+ ``suffix_length`` fresh tokens. The requests are shuffled and arrive at Poisson times.
rid = arrival order. Token namespaces: group g -> g, request i -> num_groups + i.
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
class SharedPrefixConfig(Plain):
    __pydantic_config__ = WORKLOAD_CONFIG

    kind: Literal["shared_prefix"] = "shared_prefix"
    num_groups: PosInt = 64
    prefix_length: NonNegInt = 2048
    suffix_length: Length() = 128
    requests_per_group: PosInt = 16
    output_length: Length() = 256
    request_rate: Rate = 1.0


class SharedPrefixWorkload(OpenLoopWorkload):
    """Open-loop: everything is returned by :meth:`start`; no follow-ups."""

    def _requests(self) -> list[Request]:
        cfg, rng = self.config, self._rng
        prefixes = [draw_tokens(rng, g, cfg.prefix_length) for g in range(cfg.num_groups)]
        groups = [g for g in range(cfg.num_groups) for _ in range(cfg.requests_per_group)]
        rng.shuffle(groups)
        arrivals = poisson_arrivals(rng, len(groups), cfg.request_rate)
        return [
            prefixed_request(rng, i, t, prefixes[g], cfg.num_groups + i,
                             draw_length(rng, cfg.suffix_length), cfg.output_length, client=g)
            for i, (g, t) in enumerate(zip(groups, arrivals, strict=True))
        ]
