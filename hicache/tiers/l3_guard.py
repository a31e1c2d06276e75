"""How a runtime guards its L3 calls: deadlines, bounded retries, a cooldown after failure.

One policy for both runtimes (the torch runtime's :mod:`gpu_backend.l3.resilient` runs it
on threads, the simulator's :mod:`sim.l3_client` in simulated time)::

    health.admit(now) ── "skip" (down, cooling off) ──> answer a miss, count l3_skipped
          │ "call" (up): 1 + retries attempts      │ "probe" (cooled off): one attempt
          ▼                                        ▼
    attempt k: bounded by policy.deadline(bytes); retry after policy.backoff(k)
          ├ an attempt answers ──> health.answered() (True: the store came back)
          └ all fail ───────────> health.failed(now): down for a cooldown that doubles
                                  (cooldown_s .. cooldown_max_s) while probes keep failing

Nothing here reads a clock: ``now`` is passed in. ``COUNTERS`` names what a runtime counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hicache.schema.plain import Plain
from hicache.schema.types import NonNegFloat, PosFloat, int_

COUNTERS = {
    "l3_errors": "operations that failed after their retries, and pages a store could not "
                 "read or write: each became a miss or a failed store",
    "l3_timeouts": "attempts abandoned at their deadline",
    "l3_retries": "attempts repeated after an error or a timeout",
    "l3_skipped": "operations answered as a miss without calling the store (marked down)",
    "l3_checksum_failures": "pages whose header, length or checksum did not match: never used",
    "l3_reconnects": "times the store answered again after being marked down",
}


@dataclass(frozen=True)
class RetryPolicy(Plain):
    """Deadlines, retries and cooldowns for one L3 client (seconds): the scenario key
    ``run.l3_retry``, read by both runtimes."""

    timeout_s: PosFloat = 2.0  # per attempt, plus the bytes moved at min_bytes_per_s
    min_bytes_per_s: PosFloat = 100e6
    retries: int_(ge=0, le=100) = 1  # attempts = 1 + retries (a probe of a down store: 1)
    backoff_s: NonNegFloat = 0.05  # before retry k: backoff_s * 2**k, at most backoff_max_s
    backoff_max_s: NonNegFloat = 1.0
    cooldown_s: NonNegFloat = 1.0  # skip a failed store this long, doubling per failed probe
    cooldown_max_s: NonNegFloat = 30.0
    # torch runtime: abandoned calls still running at which the store counts as down
    max_stuck: int_(ge=1, le=1024) = 4
    # torch runtime: close waits timeout_s + this (a Mooncake client's close waits up to
    # 5 s for calls a deadline abandoned)
    close_grace_s: NonNegFloat = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for low, high in (("backoff_s", "backoff_max_s"), ("cooldown_s", "cooldown_max_s")):
            if getattr(self, high) < getattr(self, low):
                raise ValueError(f"{high}: must be >= {low} ({getattr(self, low)!r}), got "
                                 f"{getattr(self, high)!r}")

    def deadline(self, nbytes: float) -> float:
        return self.timeout_s + nbytes / self.min_bytes_per_s

    def backoff(self, retry: int) -> float:
        return min(self.backoff_max_s, self.backoff_s * 2 ** retry)

    def attempts(self, probe: bool) -> int:
        return 1 if probe else 1 + self.retries


Admission = Literal["call", "probe", "skip"]


class L3Health:
    """Up, or down until a time: the state machine of the module diagram (not thread-safe:
    a threaded caller holds its own lock around it)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.down_until: float | None = None
        self.cooldown = 0.0
        self.probing = False

    @property
    def down(self) -> bool:
        return self.down_until is not None

    def admit(self, now: float) -> Admission:
        """May a call go to the store at ``now``: normally, as the one probe, or not."""
        if self.down_until is None:
            return "call"
        if self.probing or now < self.down_until:
            return "skip"
        self.probing = True
        return "probe"

    def answered(self) -> bool:
        """An attempt answered; True when that ends a down spell (a reconnect)."""
        was_down = self.down_until is not None
        self.down_until, self.cooldown, self.probing = None, 0.0, False
        return was_down

    def failed(self, now: float) -> float:
        """Every attempt of an operation failed at ``now``: down for the returned cooldown."""
        self.cooldown = min(self.policy.cooldown_max_s,
                            max(self.policy.cooldown_s, 2 * self.cooldown))
        self.down_until = now + self.cooldown
        self.probing = False
        return self.cooldown
