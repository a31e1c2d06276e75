"""``faults:``: failures the simulator injects in windows of simulated time.

    faults:
      - {kind: l3_node_down, start: 60, end: 120, node: 0}   # its keys are lost
      - {kind: l3_store_down, start: 200, end: 230}          # every call refused
      - {kind: l3_timeout, start: 300, end: 320}             # calls hang to their deadline
      - {kind: link_slow, link: pcie, factor: 0.25, start: 10, end: 40, replica: 0}
      - {kind: link_down, link: nic, start: 50, end: 55}     # that replica loses L3
      - {kind: host_pressure, bandwidth_factor: 0.3, start: 400, end: 460}

Each entry is one frozen dataclass, picked by ``kind``; ``start < end`` (seconds from the
run's start); ``replica`` (link and host faults) is one replica, or every replica when
omitted. What each does, and why a PCIe link cannot be lost, is in :mod:`sim.faults`; the
torch runtime meets real faults instead (``gpu_backend.l3``) and refuses this section.
Cross-checks that need the hardware profile (a node index within ``l3.mooncake.nodes``)
or the replica count are made when the simulator builds the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Union

from hicache.schema.constraints import ByKind
from hicache.schema.plain import Plain
from hicache.schema.types import Bool, NonNegFloat, NonNegInt, PosFloat, float_

Factor = float_(gt=0.0, le=1.0)


@dataclass(frozen=True, kw_only=True)
class _Window(Plain):
    start: NonNegFloat
    end: PosFloat

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.end <= self.start:
            raise ValueError(f"end: {self.end:g} must be after start {self.start:g}")

    @property
    def label(self) -> str:
        kind = getattr(self, "kind", "fault")
        return f"{kind} [{self.start:g}, {self.end:g}) s"


@dataclass(frozen=True)
class L3NodeDown(_Window):
    """A Mooncake storage node dies: the keys on it are lost, writes go to the others,
    the store serves (and holds) one node less; it comes back empty."""

    kind: Literal["l3_node_down"] = "l3_node_down"
    node: NonNegInt = 0


@dataclass(frozen=True)
class L3StoreDown(_Window):
    """The whole store is down (the master): every call is refused at once; with
    ``lose_data`` the restarted store has lost every key."""

    kind: Literal["l3_store_down"] = "l3_store_down"
    lose_data: Bool = True


@dataclass(frozen=True)
class L3Timeout(_Window):
    """The store stops answering: calls hang until the runtime's deadline abandons them
    (prefetches time out)."""

    kind: Literal["l3_timeout"] = "l3_timeout"


@dataclass(frozen=True)
class LinkSlow(_Window):
    """A link runs at ``factor`` of its rate: ``pcie`` (H2D and D2H) or ``nic`` (L3)."""

    kind: Literal["link_slow"] = "link_slow"
    link: Literal["pcie", "nic"] = "pcie"
    factor: Factor = 0.5
    replica: NonNegInt | None = None


@dataclass(frozen=True)
class LinkDown(_Window):
    """A replica's NIC is lost: its L3 calls hang until their deadline."""

    kind: Literal["link_down"] = "link_down"
    link: Literal["pcie", "nic"] = "nic"
    replica: NonNegInt | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.link == "pcie":
            raise ValueError("link: a lost PCIe link is a lost GPU, not a fault a run "
                             "survives; use kind link_slow with link pcie and a factor, or "
                             "link nic")


@dataclass(frozen=True)
class HostPressure(_Window):
    """Another tenant takes host memory bandwidth: PCIe and L3 traffic share
    ``bandwidth_factor`` of it."""

    kind: Literal["host_pressure"] = "host_pressure"
    bandwidth_factor: Factor = 0.5
    replica: NonNegInt | None = None


FAULT_KINDS: dict[str, type] = {c.kind: c for c in (  # type: ignore[attr-defined]
    L3NodeDown, L3StoreDown, L3Timeout, LinkSlow, LinkDown, HostPressure)}
L3_KINDS = frozenset({"l3_node_down", "l3_store_down", "l3_timeout"})


Fault = Annotated[Union[tuple(FAULT_KINDS.values())], ByKind()]  # noqa: UP007
Faults = tuple[Fault, ...]

__all__ = ["FAULT_KINDS", "L3_KINDS", "Fault", "Faults", "HostPressure", "L3NodeDown",
           "L3StoreDown", "L3Timeout", "LinkDown", "LinkSlow"]
