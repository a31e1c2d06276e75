"""The L3 client contract: batch operations over page-hash keys.

Invariants every implementation keeps:
- results are positional: result[i] answers keys[i];
- `batch_set` never rewrites a key that is already stored (it reports True for it),
  so a page written once keeps its first value;
- `batch_get` returns None for a key that is not stored; stored values are never empty.
- a call that fails as a whole raises :class:`L3Error` (or any OSError/RuntimeError); a
  call where only some keys failed raises :class:`L3PartialError` carrying the answers
  for the others, so one unreadable page does not cost its neighbours.
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

_KEY_RE = re.compile(r"^[0-9a-zA-Z_\-]{1,200}$")


class L3Error(RuntimeError):
    """The store failed a whole call (unreachable, refused, an error code)."""


class L3PartialError(L3Error):
    """Some keys of a batch call failed. ``results`` answers every key as the call would
    have (None / False where a key failed); ``errors`` maps those positions to why."""

    def __init__(self, what: str, results: list, errors: dict[int, BaseException]) -> None:
        first = next(iter(errors.values()))
        super().__init__(f"{what}: {len(errors)} of {len(results)} keys failed, "
                         f"first: {first!r}")
        self.results = results
        self.errors = errors


@runtime_checkable
class L3Client(Protocol):
    """A page store keyed by page-hash hex strings."""

    def batch_exists(self, keys: list[str]) -> list[bool]:
        """Whether each key is stored."""
        ...

    def batch_get(self, keys: list[str]) -> list[bytes | None]:
        """The stored value of each key, or None where it is not stored."""
        ...

    def batch_set(self, keys: list[str], values: list[bytes]) -> list[bool]:
        """Store each value unless its key exists; True where the key is stored afterwards."""
        ...

    def close(self) -> None:
        """Release the client's resources; further calls are an error."""
        ...


class Removable(Protocol):
    """Optional: clients that can drop keys (used to evict pages that fail their checksum)."""

    def batch_remove(self, keys: list[str]) -> list[bool]: ...


def check_keys_values(keys: list[str], values: list[bytes] | None = None) -> None:
    """Reject malformed keys, empty values and mismatched lengths (ValueError)."""
    for key in keys:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"invalid L3 key {key!r}: expected a page-hash hex string")
    if values is None:
        return
    if len(values) != len(keys):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    for key, value in zip(keys, values, strict=True):
        if len(value) == 0:
            raise ValueError(f"empty value for key {key!r}: L3 pages are never empty")
