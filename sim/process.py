"""A SimRuntime built inside a runtime process (:mod:`ipc`), for studies of the split.

The simulated runtime keeps its own SimPy environment there; a driver outside moves its
clock only through the interface's ``wait`` (as ``tests/kvcache`` drives it), so the same
scheduler code runs against it in or out of process.
"""

from __future__ import annotations

from typing import Any

import simpy

from sim.hardware.profile import load_profile
from sim.l3 import L3Store
from sim.runtime import SimRuntime


class StandaloneSimRuntime(SimRuntime):
    """A SimRuntime that owns its environment and reads its clock as ``now()``; ``l3``
    names the profile's store to build in that environment ("mooncake", "file")."""

    def __init__(self, generation: int = 0, *, profile: Any, l3: str | None = None,
                 **kwargs: Any) -> None:
        env = simpy.Environment()
        profile = load_profile(profile)
        store = None
        if l3 == "mooncake":
            store = L3Store.mooncake(env, profile.mooncake)
        elif l3 == "file":
            store = L3Store.file(env, profile.file)
        elif l3 is not None:
            raise ValueError(f"l3 must be 'mooncake', 'file' or None, got {l3!r}")
        super().__init__(env, profile=profile, l3=store, **kwargs)
        while self.generation < generation:  # the constructor starts at generation 1
            self.restart()

    def now(self) -> float:
        return self.env.now

    def drain(self, timeout: float | None = None) -> bool:
        self.env.run(until=None if timeout is None else self.env.now + timeout)
        return self.env.peek() == float("inf")


def standalone_sim_runtime(generation: int, **kwargs: Any) -> StandaloneSimRuntime:
    """Factory for :class:`ipc.ProcessGPURuntime` (``functools.partial`` over kwargs)."""
    return StandaloneSimRuntime(generation, **kwargs)
