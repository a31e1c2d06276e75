"""The RuntimeInterface across a process boundary (the seed design's phase 4).

    scheduler process                              runtime process
    ProcessGPURuntime --- ZeroMQ PAIR (ipc://) --> serve(): one runtime (torch or sim),
      holds handles only   pickled frozen messages   its pools, lanes and clock

Imports ``hicache`` and ``zmq`` only; the runtime itself is built in the child process by
a factory the composition root passes in (``gpu_backend`` or ``sim``), so this package
never imports either (``tests/architecture``).
"""

from typing import Any

from ipc.errors import RuntimeProcessDied

__all__ = ["ProcessGPURuntime", "RuntimeProcessDied"]


def __getattr__(name: str) -> Any:  # ZeroMQ is imported only when a process is started
    if name == "ProcessGPURuntime":
        from ipc.client import ProcessGPURuntime

        return ProcessGPURuntime
    raise AttributeError(name)
