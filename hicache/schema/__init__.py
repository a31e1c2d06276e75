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

from hicache.schema.errors import InputError, format_errors
from hicache.schema.yamlio import YamlDoc, read_yaml, read_yaml_text

__all__ = ["InputError", "YamlDoc", "format_errors", "read_yaml", "read_yaml_text"]
