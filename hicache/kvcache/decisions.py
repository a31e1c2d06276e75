"""The decisions the control plane logs: small frozen records, one class per kind.

    Admit(rid, device, host, l3)   Load(rid, tokens)   Evict(node, tokens, how)
    Backup(node, tokens)           Prefetch(rid, from_page, pages)
    PrefetchStop(rid, reason)      Finish(rid)         Reject(rid, reason)

Runs compare their decision logs (simulator against torch runtime) and write them to
``decisions.csv``; :meth:`Decision.row` gives the flat ``(kind, *fields)`` tuple both use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from hicache.runtime.slot_init import slot_init


@slot_init
@dataclass(frozen=True, slots=True)
class Decision:
    kind: ClassVar[str] = ""

    def row(self) -> tuple:
        """``(kind, *fields)``: the decision as one flat log row (every field is a scalar,
        so this is ``astuple`` without its deep copy). Each kind below spells it out (a
        run logs tens of thousands of decisions: plain slot reads, no getattr per field);
        a test checks each against this one."""
        return (self.kind, *[getattr(self, name) for name in self.__match_args__])


@slot_init
@dataclass(frozen=True, slots=True)
class Admit(Decision):
    """A request starts: tokens reused from L1, from L2 and (through L2) from L3."""

    kind: ClassVar[str] = "admit"
    rid: int
    device: int
    host: int
    l3: int

    def row(self) -> tuple:
        return ("admit", self.rid, self.device, self.host, self.l3)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class Load(Decision):
    """L2 pages are loaded back to L1 for an admitted request."""

    kind: ClassVar[str] = "load"
    rid: int
    tokens: int

    def row(self) -> tuple:
        return ("load", self.rid, self.tokens)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class Evict(Decision):
    """A node left L1: ``demote`` (its L2 copy stays) or ``delete`` (gone from the tree)."""

    kind: ClassVar[str] = "evict"
    node: int
    tokens: int
    how: Literal["demote", "delete"]

    def row(self) -> tuple:
        return ("evict", self.node, self.tokens, self.how)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class Backup(Decision):
    """A node's L1 pages are copied to L2 (write policy or write-back eviction)."""

    kind: ClassVar[str] = "backup"
    node: int
    tokens: int

    def row(self) -> tuple:
        return ("backup", self.node, self.tokens)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class Prefetch(Decision):
    """L3 is asked for a request's pages from page ``from_page``, at most ``pages``."""

    kind: ClassVar[str] = "prefetch"
    rid: int
    from_page: int
    pages: int

    def row(self) -> tuple:
        return ("prefetch", self.rid, self.from_page, self.pages)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class PrefetchStop(Decision):
    """The stop policy let a prefetching request go (complete, best_effort, timeout)."""

    kind: ClassVar[str] = "prefetch_stop"
    rid: int
    reason: str

    def row(self) -> tuple:
        return ("prefetch_stop", self.rid, self.reason)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class Finish(Decision):
    kind: ClassVar[str] = "finish"
    rid: int

    def row(self) -> tuple:
        return ("finish", self.rid)  # Decision.row, in line


@slot_init
@dataclass(frozen=True, slots=True)
class Reject(Decision):
    """A request that can never be served is refused on arrival; ``reason`` is the code
    (``exceeds_l1``, ``exceeds_swa_pool``, ``no_running_slots``, ...)."""

    kind: ClassVar[str] = "reject"
    rid: int
    reason: str


    def row(self) -> tuple:
        return ("reject", self.rid, self.reason)  # Decision.row, in line
