"""FileL3: the embedded default L3, one file per page key on a local directory.

Invariants: a key's file appears atomically with its full value (write to a hidden temp
file, then hard-link into place, which fails if the key exists, so a stored value is never
rewritten); `used_bytes` never exceeds `capacity_bytes` through this client (writes that
would exceed it are refused, nothing is evicted). A local directory is private to one
machine, so this backend is not shared between replicas on different hosts.
I/O errors are per key: a page that cannot be read or written (permissions, a read-only or
removed directory, a directory in its place, EIO) fails alone and the call raises
:class:`L3PartialError` with the other keys' answers; a missing file is a plain miss. A
removed L3 directory is not recreated (it may be an unmounted volume).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_backend.l3.base import L3PartialError, check_keys_values


class FileL3:
    """One file per key under `directory/<key[:2]>/<key>`."""

    def __init__(
        self, directory: str | os.PathLike[str], capacity_bytes: int | None = None,
        fsync: bool = False,
    ) -> None:
        if capacity_bytes is not None and capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.capacity_bytes = capacity_bytes
        self.fsync = fsync
        self.used_bytes = self._scan_used_bytes()
        self._closed = False
        self._lock = threading.Lock()  # guards used_bytes across caller threads

    def _scan_used_bytes(self) -> int:
        total = 0
        for sub in self.directory.iterdir():
            if sub.is_dir():
                total += sum(f.stat().st_size for f in sub.iterdir() if not f.name.startswith("."))
        return total

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("FileL3 is closed")

    def batch_exists(self, keys: list[str]) -> list[bool]:
        self._check_open()
        check_keys_values(keys)
        return _per_key("exists", keys, lambda k: self._path(k).is_file(), False)

    def batch_get(self, keys: list[str]) -> list[bytes | None]:
        self._check_open()
        check_keys_values(keys)
        return _per_key("get", keys, self._get_one, None)

    def _get_one(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def batch_set(self, keys: list[str], values: list[bytes]) -> list[bool]:
        self._check_open()
        check_keys_values(keys, values)
        return _per_key("set", list(zip(keys, values, strict=True)),
                        lambda kv: self._set_one(*kv), False)

    def batch_remove(self, keys: list[str]) -> list[bool]:
        """Delete each key's file; True where the key is absent afterwards."""
        self._check_open()
        check_keys_values(keys)
        return _per_key("remove", keys, self._remove_one, False)

    def _remove_one(self, key: str) -> bool:
        path = self._path(key)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return True
        with self._lock:
            self.used_bytes -= size
        return True

    def _set_one(self, key: str, value: bytes) -> bool:
        final = self._path(key)
        if final.is_file():
            return True
        size = len(value)
        final.parent.mkdir(exist_ok=True)
        with self._lock:  # reserve the bytes first so concurrent writers respect capacity
            if self.capacity_bytes is not None and self.used_bytes + size > self.capacity_bytes:
                return False
            self.used_bytes += size
        stored = False
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=final.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(value)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.link(tmp, final)
            stored = True
        except FileExistsError:
            pass  # another writer stored the key first; its value stays
        finally:
            if tmp is not None:
                os.unlink(tmp)
            if not stored:
                with self._lock:
                    self.used_bytes -= size
        return True

    def close(self) -> None:
        self._closed = True


def _per_key(what: str, items: list, one: Callable[[Any], Any], failed: Any) -> list:
    """``one(item)`` for each item; OSErrors become ``failed`` answers and, if any, an
    :class:`L3PartialError` carrying all the answers."""
    out, errors = [], {}
    for i, item in enumerate(items):
        try:
            out.append(one(item))
        except OSError as exc:
            out.append(failed)
            errors[i] = exc
    if errors:
        raise L3PartialError(f"FileL3 {what}", out, errors)
    return out
