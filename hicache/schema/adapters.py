"""pydantic at the input edge: validate plain data as a type, and its JSON Schema.

    validate(CacheConfig, {"page_size": 32})   -> CacheConfig, or raises SchemaErrors
    format_errors(e, source=..., root=CacheConfig)   one message per problem (errors.py)
    json_schema(Scenario)                      -> dict

The config types are plain dataclasses whose annotations pydantic reads (markers of
:mod:`hicache.schema.constraints`); pydantic is imported when the first input is validated,
never when this module is imported, so the modules that call this stay importable (and
the runtime path runs) without it. One cached ``TypeAdapter`` per type.
"""

from __future__ import annotations

import functools
from typing import Any


class SchemaErrors(ValueError):
    """An input that failed validation; ``error`` is pydantic's ValidationError (read it
    with :func:`hicache.schema.errors.format_errors`)."""

    def __init__(self, error: Any) -> None:
        super().__init__(str(error))
        self.error = error


NEEDS_PYDANTIC = (
    "validating input needs pydantic (pip install 'pydantic>=2.6'); a machine without it "
    "runs a scenario resolved elsewhere: write_resolved(scenario, 'scenario.resolved.json') "
    "there, load_resolved('scenario.resolved.json') (or pass the file as SCENARIO) here")


@functools.cache
def adapter(tp: Any) -> Any:
    """The (cached) ``pydantic.TypeAdapter`` of ``tp``."""
    try:
        from pydantic import TypeAdapter
    except ImportError:
        raise ImportError(NEEDS_PYDANTIC) from None
    return TypeAdapter(tp)


def validate(tp: Any, data: Any, *, context: dict[str, Any] | None = None) -> Any:
    """``data`` validated as ``tp`` (``context`` reaches the fields' validators)."""
    checker = adapter(tp)
    from pydantic import ValidationError

    try:
        return checker.validate_python(data, context=context)
    except ValidationError as e:
        raise SchemaErrors(e) from None


def json_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema (validation mode) of ``tp``."""
    return adapter(tp).json_schema(mode="validation")
