"""Factories that build a TorchRuntime inside a runtime process (:mod:`ipc`).

A factory is called in the child as ``factory(generation)``; it builds the L3 client there
too (a Mooncake connection does not cross a process), and the runtime it returns closes
that client when the server closes it.
"""

from __future__ import annotations

from typing import Any

from gpu_backend.runtime import TorchRuntime
from gpu_backend.shapes import ModelShape
from hicache.scenario import Scenario


class _WithL3:
    """A runtime and the L3 client it alone uses: closing one closes both."""

    def __init__(self, rt: TorchRuntime) -> None:
        self.rt = rt

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rt, name)

    def close(self) -> None:
        self.rt.close()
        close = getattr(self.rt.l3, "close", None)
        if close is not None:
            close()


def batch_specs_of(rt: Any) -> dict[int, list[tuple[int, int]]]:
    """The runtime's (new, context) per slice of every batch it computed."""
    return rt.batch_specs


def log_l3_faults(rt: Any) -> None:
    """Name on the console (of the runtime's process) what the L3 fault counters hold."""
    rt.l3.faults.log_summary()


def torch_runtime(generation: int, shape: ModelShape, **kwargs: Any) -> TorchRuntime:
    """``TorchRuntime(shape, generation=generation, **kwargs)``."""
    return TorchRuntime(shape, generation=generation, **kwargs)


def scenario_runtime(generation: int, sc: Scenario, shape: ModelShape, device: str,
                     l3_dir: str) -> Any:
    """The runtime :func:`gpu_backend.driver.build_runtime` builds for ``sc``, with its
    own L3 client (a file store under ``l3_dir``, or Mooncake from the environment)."""
    from gpu_backend.driver import build_runtime, make_l3

    return _WithL3(build_runtime(sc, sc.cache, shape, device, make_l3(sc.cache, l3_dir),
                                 generation=generation))
