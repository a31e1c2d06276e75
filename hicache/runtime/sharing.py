"""How schedulers that share one runtime share its device KV pool (the seed's phase 5).

    policy   per scheduler ("tenant")                  limit(t), given every tenant's use
    static   quota_t                                   quota_t
    shared   minimum_t guaranteed; free pages are      total - sum over u != t of
             borrowed first come; a tenant above its       max(minimum_u, used_u),
             fair share (the minimums scaled up to the  lowered while others below their
             pool) gives pages back while a tenant      fair share are short, but never
             below its own is short of them             below t's fair share

``used_u`` is what tenant u's scheduler has accounted (tree pages, running requests'
reservations, admitted loads) and, while frees it decided have not reached the runtime
yet, what the runtime still holds for it: the larger of the two, so one scheduler never
counts on pages another has only promised to free.

Invariants (tests/shared): sum over tenants of max(minimum, used) <= total, hence the
runtime never runs out; a tenant can always reach its minimum; with ``static`` no tenant
ever holds more than its quota.

:class:`PoolLedger` is the control-side view all tenants' page budgets consult (the
schedulers share one control process, as SGLang's data-parallel controller does); the
runtime side (:mod:`hicache.runtime.shared`) places pages from one allocator and reports
what each tenant holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hicache.schema.plain import Plain
from hicache.schema.types import float_

POLICIES = ("static", "shared")
POOLS = ("none", *POLICIES)


@dataclass(frozen=True)
class SharingConfig(Plain):
    """The scenario's ``sharing``: how replicas use GPU memory. ``none``: each replica has
    its own runtime (a GPU each). ``static``: the replicas share one runtime (one GPU:
    one allocator, one compute stream) and each gets a private partition of
    ``cache.device_tokens`` (``fractions``, default equal). ``shared``: one runtime, one
    pool; each replica is guaranteed ``fractions`` of it (default 1 / (2 x replicas))
    and borrows the rest."""

    pool: Literal[POOLS] = "none"
    fractions: tuple[float_(gt=0.0, le=1.0), ...] | None = None

    def policy(self, total: int, tenants: Sequence[str]) -> SharingPolicy:
        if self.pool == "none":
            raise ValueError("sharing.pool is 'none': no policy")
        if self.fractions is not None and sum(self.fractions) > 1.0 + 1e-9:
            raise ValueError(f"sharing.fractions: {list(self.fractions)} add up to more "
                             f"than 1")
        return SharingPolicy.split(self.pool, total, tenants, self.fractions)


@dataclass(frozen=True)
class SharingPolicy:
    """``kind`` "static": each tenant is held to ``share[t]`` pages. "shared": each tenant
    is guaranteed ``share[t]`` pages and may borrow the rest of the pool."""

    kind: str
    total: int
    share: Mapping[str, int]

    def __post_init__(self) -> None:
        if self.kind not in POLICIES:
            raise ValueError(f"sharing policy must be one of {POLICIES}, got {self.kind!r}")
        if any(v < 0 for v in self.share.values()):
            raise ValueError(f"sharing: negative pages in {dict(self.share)}")
        if sum(self.share.values()) > self.total:
            what = "quotas" if self.kind == "static" else "minimums"
            raise ValueError(f"sharing: {what} {dict(self.share)} add up to more than the "
                             f"pool's {self.total} pages")

    @classmethod
    def split(cls, kind: str, total: int, tenants: Sequence[str],
              fractions: Sequence[float] | None = None) -> SharingPolicy:
        """Quotas (static) or minimums (shared) as fractions of ``total`` (default: equal
        quotas for static, none guaranteed beyond ``1 / (2 n)`` each for shared)."""
        n = len(tenants)
        if fractions is None:
            fractions = [1 / n if kind == "static" else 1 / (2 * n)] * n
        if len(fractions) != n:
            raise ValueError(f"sharing.fractions: {len(fractions)} fractions for {n} "
                             f"schedulers (replicas)")
        return cls(kind, total, {t: int(total * f) for t, f in zip(tenants, fractions,
                                                                    strict=True)})

    def capacity(self, tenant: str) -> int:
        """The most ``tenant`` can ever hold (requests needing more are never servable)."""
        if self.kind == "static":
            return self.share[tenant]
        return self.total - sum(v for t, v in self.share.items() if t != tenant)

    def fair(self, tenant: str) -> int:
        """The tenant's share of the whole pool: its minimum scaled up to the total."""
        return self.total * self.share[tenant] // max(1, sum(self.share.values()))

    def limit(self, tenant: str, used: Mapping[str, int], short: Mapping[str, int]
              ) -> int:
        """Pages ``tenant`` may account now. ``used``: every tenant's use; ``short``:
        pages tenants failed to find at their last admission (0 if none)."""
        if self.kind == "static":
            return self.share[tenant]
        others = sum(max(self.share[u], used.get(u, 0)) for u in self.share if u != tenant)
        limit = self.total - others
        claim = sum(min(n, self.fair(u) - used.get(u, 0)) for u, n in short.items()
                    if u != tenant and n > 0 and used.get(u, 0) < self.fair(u))
        mine, fair = used.get(tenant, 0), self.fair(tenant)
        if claim > 0 and mine > fair:  # give back borrowed pages, down to the fair share
            limit = min(limit, max(fair, mine - claim))
        return max(limit, 0)


class PoolLedger:
    """The tenants' accounted use, for their page budgets (see the module docstring)."""

    def __init__(self, policy: SharingPolicy,
                 placed: Callable[[str], int] | None = None) -> None:
        self.policy = policy
        self.placed = placed  # tenant -> pages the runtime holds for it now
        self._used: dict[str, Callable[[], int]] = {}
        self.short: dict[str, int] = {}

    def join(self, tenant: str, used: Callable[[], int]) -> TenantShare:
        if tenant not in self.policy.share:
            raise ValueError(f"tenant {tenant!r} has no share in {dict(self.policy.share)}")
        self._used[tenant] = used
        self.short[tenant] = 0
        return TenantShare(self, tenant)

    def used(self, tenant: str) -> int:
        accounted = self._used[tenant]()
        return max(accounted, self.placed(tenant)) if self.placed is not None else accounted

    def limit(self, tenant: str) -> int:
        used = {t: self.used(t) for t in self._used}
        return self.policy.limit(tenant, used, self.short)


@dataclass(frozen=True)
class TenantShare:
    """One tenant's handle on the ledger; a PageBudget's ``share``."""

    ledger: PoolLedger
    tenant: str

    def limit(self) -> int:
        return self.ledger.limit(self.tenant)

    def capacity(self) -> int:
        return self.ledger.policy.capacity(self.tenant)

    def short(self, pages: int) -> None:
        """The tenant could not find ``pages`` more pages (0: it found what it needed)."""
        self.ledger.short[self.tenant] = max(0, pages)
