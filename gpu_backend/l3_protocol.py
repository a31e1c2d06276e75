"""What the runtime needs from an L3 store, and the jobs it runs against one.

Clients in ``gpu_backend/l3/`` (file, Mooncake) implement :class:`L3Store`;
:class:`MemoryL3` is an in-process dict for tests. A page's value is the bytes of its
logical (2, L, page, H, D) slice (see :meth:`HostPool.page_bytes`); the runtime reaches
every store through :func:`gpu_backend.l3.guard`, which frames it with a checksum, bounds
each call in time and turns failures into misses (values read back may be memoryviews).
Invariants: a store writes only keys L3 lacks; a prefetch counts consecutive hits from
the first key, stops at the first miss, and fetches only a prefix of the hits.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpu_backend.pools import HostPool


@runtime_checkable
class L3Store(Protocol):
    def batch_exists(self, keys: list[str]) -> list[bool]: ...

    def batch_get(self, keys: list[str]) -> list[bytes | None]: ...

    def batch_set(self, keys: list[str], values: list[bytes]) -> list[bool]: ...


class MemoryL3:
    """A thread-safe dict implementing :class:`L3Store`."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def batch_exists(self, keys: list[str]) -> list[bool]:
        with self._lock:
            return [k in self.data for k in keys]

    def batch_get(self, keys: list[str]) -> list[bytes | None]:
        with self._lock:
            return [self.data.get(k) for k in keys]

    def batch_set(self, keys: list[str], values: list[bytes]) -> list[bool]:
        with self._lock:
            self.data.update(zip(keys, values, strict=True))
        return [True] * len(keys)

    def batch_remove(self, keys: list[str]) -> list[bool]:
        with self._lock:
            for k in keys:
                self.data.pop(k, None)
        return [True] * len(keys)


def store_pages(l3: L3Store, host: HostPool, pages: Sequence[int],
                keys: Sequence[str]) -> tuple[int, int]:
    """Write host pages whose keys L3 lacks. Returns (pages written, bytes written)."""
    if len(pages) != len(keys):
        raise ValueError(f"{len(pages)} pages but {len(keys)} keys")
    have = l3.batch_exists(list(keys))
    todo = [(k, p) for k, p, h in zip(keys, pages, have, strict=True) if not h]
    if not todo:
        return 0, 0
    values = [host.page_bytes(p) for _, p in todo]
    ok = l3.batch_set([k for k, _ in todo], values)
    written = [v for v, good in zip(values, ok, strict=True) if good]
    return len(written), sum(len(v) for v in written)


def count_hits(l3: L3Store, keys: Sequence[str], batch_pages: int) -> int:
    """Consecutive hits from the first key, queried ``batch_pages`` keys at a time."""
    hits = 0
    for i in range(0, len(keys), max(1, batch_pages)):
        found = l3.batch_exists(list(keys[i:i + batch_pages]))
        for f in found:
            if not f:
                return hits
            hits += 1
    return hits


def fetch_pages(l3: L3Store, host: HostPool, keys: Sequence[str], pages: Sequence[int],
                batch_pages: int) -> tuple[int, int]:
    """Fetch ``keys[i]`` into ``pages[i]`` until one is missing. Returns (pages, bytes)."""
    done = nbytes = 0
    for i in range(0, len(pages), max(1, batch_pages)):
        blobs = l3.batch_get(list(keys[i:i + batch_pages]))
        for blob, page in zip(blobs, pages[i:i + batch_pages], strict=False):
            if blob is None:
                return done, nbytes
            host.load_page_bytes(page, blob)
            done += 1
            nbytes += len(blob)
    return done, nbytes
