"""Synthetic shared-prefix workload (like bench_serving's generated-shared-prefix).

``num_groups`` groups, each with one shared prefix of ``prefix_length`` tokens and
``requests_per_group`` requests; a request's prompt = its group's prefix (shared array)
+ ``suffix_length`` fresh tokens. The requests are shuffled and arrive at Poisson times.
rid = arrival order. Token namespaces: group g -> g, request i -> num_groups + i.
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
class SharedPrefixConfig:
    num_groups: int = 64
    prefix_length: int = 2048
    suffix_length: LengthSpec = 128
    requests_per_group: int = 16
    output_length: LengthSpec = 256
    request_rate: float = 1.0

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "num_groups", int_param("num_groups", self.num_groups, 1))
        s(self, "prefix_length", int_param("prefix_length", self.prefix_length, 0))
        s(self, "suffix_length", length_param("suffix_length", self.suffix_length))
        s(self, "requests_per_group", int_param("requests_per_group",
                                                self.requests_per_group, 1))
        s(self, "output_length", length_param("output_length", self.output_length))
        s(self, "request_rate", rate_param("request_rate", self.request_rate))


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
