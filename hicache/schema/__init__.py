"""Typed, validated inputs: strict scalar types, a strict YAML reader and error messages.

Every user-facing input (scenario files, hardware and model presets, ``--set`` overrides,
sweep grids) is parsed by :func:`read_yaml` and validated by pydantic models built from
the types in :mod:`hicache.schema.types`; a pydantic ``ValidationError`` is turned into one
message per problem by :func:`format_errors` (``file:line: key.path: problem, got X``).
"""

from hicache.schema.errors import InputError, format_errors
from hicache.schema.yamlio import YamlDoc, read_yaml, read_yaml_text

__all__ = ["InputError", "YamlDoc", "format_errors", "read_yaml", "read_yaml_text"]
