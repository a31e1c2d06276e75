"""Component specs of the unified tree: one frozen spec per kind of per-node data.

    FULL   KV pages for every token of the node; reuse needs it on the whole path
    SWA    sliding-window KV pages; reuse needs a live ``window`` of tokens ending at the
           boundary
    MAMBA  a recurrent-state checkpoint at the node's end; reuse needs one exactly at the
           boundary; requests get a private copy (copy-on-write)
    sidecar  an extra pool that shares the index and every transfer of FULL or SWA
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache.runtime.handles import Kind

__all__ = ["ComponentSpec", "Kind", "SidecarSpec", "TreeSpec"]


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    kind: Kind
    window: int = 0  # tokens (SWA only)

    @property
    def name(self) -> str:
        return self.kind.value

    @property
    def paged(self) -> bool:
        """FULL and SWA hold one page per page of the node's span; MAMBA holds one slot."""
        return self.kind is not Kind.MAMBA


@dataclass(frozen=True, slots=True)
class SidecarSpec:
    name: str
    follows: Kind  # FULL or SWA


@dataclass(frozen=True, slots=True)
class TreeSpec:
    """The components of one tree. Any set that contains FULL."""

    page_size: int = 1
    components: tuple[ComponentSpec, ...] = (ComponentSpec(Kind.FULL),)
    sidecars: tuple[SidecarSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        kinds = [c.kind for c in self.components]
        if Kind.FULL not in kinds:
            raise ValueError("a tree needs the FULL component")
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"duplicate components: {[k.value for k in kinds]}")
        for c in self.components:
            if c.kind is Kind.SWA and c.window < 1:
                raise ValueError("the SWA component needs window >= 1 token")
        for s in self.sidecars:
            if s.follows not in (Kind.FULL, Kind.SWA) or s.follows not in kinds:
                raise ValueError(f"sidecar {s.name!r} must follow a FULL or SWA component present")

    def get(self, kind: Kind) -> ComponentSpec | None:
        for c in self.components:
            if c.kind is kind:
                return c
        return None

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return tuple(c.kind for c in self.components)

    def sidecars_of(self, kind: Kind) -> tuple[SidecarSpec, ...]:
        return tuple(s for s in self.sidecars if s.follows is kind)

    @classmethod
    def hybrid(cls, page_size: int, *, swa_window: int = 0, mamba: bool = False,
               sidecars: tuple[SidecarSpec, ...] = ()) -> TreeSpec:
        comps = [ComponentSpec(Kind.FULL)]
        if swa_window:
            comps.append(ComponentSpec(Kind.SWA, window=swa_window))
        if mamba:
            comps.append(ComponentSpec(Kind.MAMBA))
        return cls(page_size, tuple(comps), sidecars)
