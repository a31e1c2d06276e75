"""Package exports imported on first use (PEP 562).

A package ``__init__`` that re-exports names from its submodules imports them all when any
submodule is imported (``hicache.scenario.command`` loads ``hicache.scenario`` first).
With ``__getattr__, __dir__ = lazy_exports(__name__, {"name": "defining.module", ...})``
a name's module is imported when the name is first read, then kept as an ordinary
attribute. Keep the same imports under ``if TYPE_CHECKING:`` beside it: type checkers and
the layering test (tests/architecture) read those.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` exporting ``exports`` (name ->
    the module that defines it)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # once: later reads are plain
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
