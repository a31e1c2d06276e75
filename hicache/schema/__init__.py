"""Typed, validated inputs: constraint markers, plain dataclass checks, a strict YAML
reader and error messages.

Configurations are frozen standard dataclasses whose fields carry constraint markers
(:mod:`hicache.schema.types`, :mod:`hicache.schema.constraints`): checked on construction
without a library (:mod:`hicache.schema.plain`). Every user-facing input (scenario files,
hardware and model presets, ``--set`` overrides, sweep grids) is parsed by
:func:`read_yaml` and validated by pydantic, which reads the same annotations
(:mod:`hicache.schema.adapters`, imported lazily: the input edge); its errors become one
message per problem by :func:`format_errors` (``file:line: key.path: problem, got X``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hicache.lazy import lazy_exports

# imported on first use (PEP 562): a submodule (constraints, plain, types: what every
# config class imports) loads without the YAML reader and the yaml package
_EXPORTS = {"InputError": "hicache.schema.errors", "format_errors": "hicache.schema.errors",
            "YamlDoc": "hicache.schema.yamlio", "read_yaml": "hicache.schema.yamlio",
            "read_yaml_text": "hicache.schema.yamlio"}

if TYPE_CHECKING:
    from hicache.schema.errors import InputError, format_errors
    from hicache.schema.yamlio import YamlDoc, read_yaml, read_yaml_text

__all__ = ["InputError", "YamlDoc", "format_errors", "read_yaml", "read_yaml_text"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
