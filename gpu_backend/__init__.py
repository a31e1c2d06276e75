"""The real torch runtime (``TorchRuntime``) behind hicache's RuntimeInterface.

Imported lazily so that ``import gpu_backend.l3`` does not pull in torch.
"""

from typing import Any

__all__ = ["TorchRuntime", "ModelShape"]


def __getattr__(name: str) -> Any:
    if name == "TorchRuntime":
        from gpu_backend.runtime import TorchRuntime

        return TorchRuntime
    if name == "ModelShape":
        from gpu_backend.shapes import ModelShape

        return ModelShape
    raise AttributeError(name)
