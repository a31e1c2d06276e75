"""Routing arrivals over replicas: pure policy over a small view of each replica.

    Router(config, views).route(request) -> replica index

``round_robin``; or ``cache_aware``, shaped like SGLang's router: when the replicas' loads
(running + waiting requests) are imbalanced (max - min > balance_abs_threshold and
max > min * balance_rel_threshold) send to the least loaded; else, if some replica's
L1+L2 holds at least ``cache_threshold`` of the prompt, send to the longest match; else
to the least loaded. The router reads a replica only through :class:`ReplicaView`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from hicache.schema.plain import Plain
from hicache.schema.types import NonNegInt, float_
from hicache.tree.radix import page_keys
from hicache.workload.request import Request

ROUTERS = ("round_robin", "cache_aware")


def _from_name(v: Any) -> Any:
    if isinstance(v, str):
        return {"policy": v}
    if v is not None and not isinstance(v, dict | RouterConfig):
        raise ValueError(f"expected a policy name ({', '.join(ROUTERS)}) or a mapping "
                         f"with key policy, got {v!r}")
    return v


@dataclass(frozen=True)
class RouterConfig(Plain):
    """The scenario's ``router``: a policy name, or a mapping with ``policy`` and the
    cache-aware thresholds (hicache-lab's defaults)."""

    policy: Literal[ROUTERS] = "round_robin"
    cache_threshold: float_(ge=0.0, le=1.0) = 0.5
    balance_abs_threshold: NonNegInt = 32
    balance_rel_threshold: float_(ge=1.0) = 1.5

    # where pydantic validates a RouterConfig (the input edge), a policy name stands for
    # {"policy": name}; the JSON Schema says so
    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema as cs

        return cs.no_info_before_validator_function(_from_name, handler(source))

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> Any:
        return {"anyOf": [{"enum": list(ROUTERS)}, handler(core_schema)]}


class ReplicaView(Protocol):
    """What the router may read of one replica."""

    def load(self) -> int:
        """Requests running or waiting."""

    def match_tokens(self, request: Request) -> int:
        """Prompt tokens of ``request`` this replica's L1+L2 holds (no recency touched)."""


class SchedulerView:
    """A :class:`ReplicaView` of a :class:`hicache.scheduler.scheduler.Scheduler`."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def load(self) -> int:
        s = self.scheduler
        return len(s.running) + len(s.waiting)

    def match_tokens(self, request: Request) -> int:
        s = self.scheduler
        # a trace prompt's own list (memo-safe where the tree takes match)
        return s.tree.reusable_tokens(page_keys(request.tokens, s.page))


class Router:
    """Spreads arrivals over ``views`` (one per replica) as ``config`` says."""

    def __init__(self, config: RouterConfig, views: Sequence[ReplicaView]) -> None:
        self.config, self.views, self._next = config, list(views), -1

    def route(self, req: Request) -> int:
        n = len(self.views)
        if n == 1:
            return 0
        if self.config.policy == "round_robin":
            self._next = (self._next + 1) % n
            return self._next
        c = self.config
        loads = [v.load() for v in self.views]
        hi, lo = max(loads), min(loads)
        least = loads.index(lo)  # the least loaded, the first of equals
        if hi - lo > c.balance_abs_threshold and hi > lo * c.balance_rel_threshold:
            return least
        matched = [v.match_tokens(req) for v in self.views]
        best = max(range(n), key=lambda i: (matched[i], -loads[i], -i))
        if req.prompt_len and matched[best] / req.prompt_len >= c.cache_threshold:
            return best
        return least
