"""MooncakeL3: an L3 client over a Mooncake distributed store (mooncake.store).

Invariants: the client itself holds no segment by default (global_segment_bytes=0), so the
data it writes lives in a long-lived storage process (`mooncake_client`) and survives this
client; `batch_set` never rewrites a stored key (keys found by `batch_is_exist` are skipped,
and Mooncake's `put`/`put_batch` keep the old value of an existing key anyway); a key
that is not stored reads as None (Mooncake returns b"" for it, which is why empty values are
refused). Batches are split so one transfer never exceeds half the local buffer.
Faults: an error code from an exists or put call raises :class:`L3Error` naming it (a full
store, NO_AVAILABLE_HANDLE, is a refusal, not an error); a key the store lists but cannot
read even alone (its storage process died) fails alone through :class:`L3PartialError`.
Timeouts and retries are the caller's (:mod:`gpu_backend.l3.resilient`): these calls
release the GIL, so a hung one can be abandoned on its thread, and the client's RPC layer
reconnects by itself once the master answers again (measured with the real store).

Setup is bounded (:func:`check_master`): ``setup()`` holds the GIL while it retries (no
Python timer can interrupt it) and blocks ~90 s on a master that is down (20 attempts) or
20 x 30 s on one that accepts connections but does not answer (paused), all measured. So
before it, the master's port is probed with a socket timeout (a down master fails in
milliseconds) and one ``setup()`` runs in a child process that is killed at
``setup_timeout_s`` (a paused or hung master fails then); only a master that answered the
child is set up here, with ``MC_STORE_CLIENT_SETUP_RETRIES=1`` unless the user set it, so
a master that dies in between costs one attempt (~4.5 s, or 30 s if it hangs), never 20.
A child rather than a thread: the store made there cannot be handed back, but the call
that holds the GIL runs in another interpreter, and killing it is always possible.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from gpu_backend.l3.base import L3Error, L3PartialError, check_keys_values

PACKAGE = "mooncake-transfer-engine-non-cuda==0.3.13.post1"
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# Mooncake Store ErrorCode values (mooncake-store/include/types.h) we name in errors
ERROR_NAMES = {-1: "INTERNAL_ERROR", -200: "NO_AVAILABLE_HANDLE", -704: "OBJECT_NOT_FOUND",
               -705: "OBJECT_ALREADY_EXISTS", -706: "OBJECT_HAS_LEASE",
               -800: "TRANSFER_FAIL", -900: "RPC_FAIL"}
NO_SPACE, NOT_FOUND = -200, -704


SETUP_TIMEOUT_S = 15.0  # a healthy master answers the child's setup in ~0.1 s (measured)
SETUP_RETRIES_ENV = "MC_STORE_CLIENT_SETUP_RETRIES"
_CHILD_SETUP = """\
import os, sys
from mooncake.store import MooncakeDistributedStore
host, metadata, protocol, device, master = sys.argv[1:]
rc = MooncakeDistributedStore().setup(host, metadata, 0, 1 << 20, protocol, device, master)
print(rc, flush=True)
os._exit(0 if rc == 0 else 3)  # no close(): it waits ~1 s and the process ends anyway
"""


class L3Unavailable(L3Error, ConnectionError):
    """The store cannot be reached at start (the message names the master and why)."""


def error_name(code: int) -> str:
    return f"{code} ({ERROR_NAMES.get(code, 'error')})"


def parse_size(value: str | int) -> int:
    """Bytes from an int or a string such as "4294967296", "4GB", "1 GB", "512mb", "64KiB"."""
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(value)
        if match is None:
            raise ValueError(f"cannot parse size {value!r}: use bytes or a number with KB/MB/GB")
        size = int(float(match.group(1)) * _UNITS[match.group(2)[:1].lower()])
    if size < 0:
        raise ValueError(f"size must be non-negative, got {value!r}")
    return size


def _env_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """MooncakeL3 keyword arguments (all but ``master``) from SGLang's MOONCAKE_* variables."""
    return {
        "metadata_server": env.get("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
        "global_segment_bytes": parse_size(env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE", "0")),
        "local_buffer_bytes": parse_size(env.get("MOONCAKE_LOCAL_BUFFER_SIZE", str(64 << 20))),
        "protocol": env.get("MOONCAKE_PROTOCOL", "tcp"),
        "device": env.get("MOONCAKE_DEVICE", ""),
        "local_hostname": env.get("MOONCAKE_LOCAL_HOSTNAME", env.get("LOCAL_HOSTNAME",
                                                                     "127.0.0.1")),
    }


def config_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """MooncakeL3 keyword arguments from SGLang's Mooncake environment variables.

    MOONCAKE_MASTER (required), MOONCAKE_TE_META_DATA_SERVER (default P2PHANDSHAKE),
    MOONCAKE_GLOBAL_SEGMENT_SIZE (default 0 here: segment-less client), MOONCAKE_PROTOCOL
    (default tcp), MOONCAKE_DEVICE (default ""), MOONCAKE_LOCAL_BUFFER_SIZE (default 64 MiB),
    MOONCAKE_LOCAL_HOSTNAME or LOCAL_HOSTNAME (default 127.0.0.1).
    """
    env = os.environ if env is None else env
    master = env.get("MOONCAKE_MASTER", "").strip()
    if not master:
        raise ValueError("The environment variable 'MOONCAKE_MASTER' is not set "
                         "(expected host:port of mooncake_master, e.g. 127.0.0.1:50051).")
    return {"master": master, **_env_defaults(env)}


# extra-config key -> MooncakeL3 keyword (sizes in bytes)
_EXTRA_KEYS = {"master_server_address": "master", "metadata_server": "metadata_server",
               "global_segment_size": "global_segment_bytes",
               "local_buffer_size": "local_buffer_bytes", "protocol": "protocol",
               "device_name": "device", "local_hostname": "local_hostname",
               "setup_timeout": "setup_timeout_s"}


def config_from_extra(extra: Mapping[str, Any],
                      env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """MooncakeL3 keyword arguments from a scenario's ``hicache_storage_backend_extra_config``.

    As SGLang's ``MooncakeStoreConfig`` chooses: with ``master_server_address`` in the extra
    config, its keys win and each absent one falls back to its environment variable;
    without it, the environment alone (:func:`config_from_env`). ``setup_timeout``
    (seconds) is hicache-lab's own key, read on both paths (SGLang ignores it)."""
    env = os.environ if env is None else env
    from_extra = bool(extra.get("master_server_address"))
    if not (from_extra or env.get("MOONCAKE_MASTER", "").strip()):
        raise ValueError("hicache_storage_backend mooncake needs a Mooncake master: set "
                         "hicache_storage_backend_extra_config.master_server_address "
                         "or the environment variable MOONCAKE_MASTER (host:port)")
    kwargs = _env_defaults(env) if from_extra else config_from_env(env)
    keys = _EXTRA_KEYS if from_extra else {"setup_timeout": "setup_timeout_s"}
    for key, kw in keys.items():
        if extra.get(key) is not None:
            kwargs[kw] = extra[key]
    return kwargs


def check_master(master: str, setup: tuple[str, str, str, str], timeout_s: float) -> None:
    """Raise :class:`L3Unavailable` unless ``master`` (host:port) accepts a connection and
    answers a client ``setup()`` (``setup``: local hostname, metadata server, protocol,
    device) made in a child process within ``timeout_s`` seconds."""
    host, sep, port = master.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"Mooncake master {master!r}: expected host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise L3Unavailable(f"Mooncake master {master} is not reachable ({e.strerror or e}): "
                            "is mooncake_master running there?") from None
    local_hostname, metadata_server, protocol, device = setup
    env = {**os.environ, SETUP_RETRIES_ENV: "1", "MC_LOG_LEVEL": "ERROR",
           "GLOG_minloglevel": "2"}
    argv = [sys.executable, "-c", _CHILD_SETUP, local_hostname, metadata_server, protocol,
            device, master]
    try:
        child = subprocess.run(argv, env=env, capture_output=True, text=True,
                               timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise L3Unavailable(f"Mooncake master {master} accepted a connection but a client "
                            f"setup did not finish within {timeout_s:g} s (is it paused or "
                            "overloaded?)") from None
    if child.returncode != 0:
        why = (child.stderr.strip().splitlines() or [f"exit {child.returncode}"])[-1]
        raise L3Unavailable(f"Mooncake master {master}: a client setup failed ({why})")


@contextmanager
def _bounded_setup_retries() -> Iterator[None]:
    """``MC_STORE_CLIENT_SETUP_RETRIES=1`` around a setup, unless the user set it."""
    if SETUP_RETRIES_ENV in os.environ:
        yield
        return
    os.environ[SETUP_RETRIES_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(SETUP_RETRIES_ENV, None)


class MooncakeL3:
    """Batch page store over `MooncakeDistributedStore` (batch_is_exist/get_batch/put_batch)."""

    def __init__(
        self, master: str, protocol: str = "tcp", metadata_server: str = "P2PHANDSHAKE",
        local_buffer_bytes: int = 64 << 20, global_segment_bytes: int = 0, device: str = "",
        local_hostname: str = "127.0.0.1", setup_timeout_s: float = SETUP_TIMEOUT_S,
    ) -> None:
        """Connect to ``master``, or raise :class:`L3Unavailable` within about
        ``setup_timeout_s`` (see the module doc: setup is probed first)."""
        try:
            from mooncake.store import MooncakeDistributedStore
        except ImportError as exc:
            raise ImportError(f"MooncakeL3 needs the Python package {PACKAGE} "
                              f"(and Debian's libibverbs1): {exc}") from exc
        self.master = master
        self.local_buffer_bytes = local_buffer_bytes
        check_master(master, (local_hostname, metadata_server, protocol, device),
                     setup_timeout_s)
        self._store: Any = MooncakeDistributedStore()
        with _bounded_setup_retries():
            rc = self._store.setup(local_hostname, metadata_server, global_segment_bytes,
                                   local_buffer_bytes, protocol, device, master)
        if rc != 0:
            raise L3Unavailable(
                f"Mooncake setup failed (rc={rc}) for master {master!r}, protocol {protocol!r}, "
                f"metadata server {metadata_server!r}: is mooncake_master running there?")
        self._closed = self._store_closed = False
        self._inflight = 0  # store calls running now (some may be abandoned by a timeout)
        self._lock = threading.Condition()
        self._max_value_bytes = 0  # largest page seen; sizes get_batch chunks

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MooncakeL3:
        """A client configured by SGLang's MOONCAKE_* variables (see `config_from_env`)."""
        return cls(**config_from_env(env))

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any],
                          env: Mapping[str, str] | None = None) -> MooncakeL3:
        """A client configured as SGLang configures one (see `config_from_extra`)."""
        return cls(**config_from_extra(extra, env))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MooncakeL3 is closed")

    def batch_exists(self, keys: list[str]) -> list[bool]:
        """1 = stored; 0 = absent; a negative code (e.g. the master is gone) is an error."""
        self._check_open()
        check_keys_values(keys)
        if not keys:
            return []
        codes = self._call("batch_is_exist", keys)
        bad = [c for c in codes if c < 0]
        if bad:
            raise L3Error(f"Mooncake batch_is_exist returned {error_name(bad[0])} for "
                          f"{len(bad)} of {len(keys)} keys (master {self.master})")
        return [c == 1 for c in codes]

    def batch_get(self, keys: list[str]) -> list[bytes | None]:
        """Values in chunks sized by the largest page seen; a read that failed for lack of
        local buffer (b"" for a stored key) is retried in halves, then one by one."""
        self._check_open()
        check_keys_values(keys)
        out: list[bytes | None] = [None] * len(keys)
        todo = list(range(len(keys)))
        per_chunk = self._get_chunk_len(len(keys))
        while todo:
            for start in range(0, len(todo), per_chunk):
                idx = todo[start:start + per_chunk]
                for i, value in zip(idx, self._call("get_batch", [keys[i] for i in idx]),
                                    strict=True):
                    if len(value):
                        out[i] = value
                        self._max_value_bytes = max(self._max_value_bytes, len(value))
            empty = [i for i in todo if out[i] is None]
            stored = self.batch_exists([keys[i] for i in empty]) if empty else []
            todo = [i for i, ok in zip(empty, stored, strict=True) if ok]
            if per_chunk == 1:
                break  # listed by the master but unreadable even alone
            per_chunk = min(per_chunk // 2, self._get_chunk_len(len(todo)))
        if todo:
            why = L3Error("stored but unreadable (is its storage process alive?)")
            raise L3PartialError("Mooncake get_batch", out, dict.fromkeys(todo, why))
        return out

    def _get_chunk_len(self, n: int) -> int:
        """Keys per get_batch so the values fit in half the local buffer (all if unknown)."""
        if self._max_value_bytes == 0:
            return max(1, n)
        return max(1, min(n, (self.local_buffer_bytes // 2) // self._max_value_bytes))

    def batch_set(self, keys: list[str], values: list[bytes]) -> list[bool]:
        self._check_open()
        check_keys_values(keys, values)
        if not keys:
            return []
        stored = dict(zip(keys, self.batch_exists(keys), strict=True))
        todo: dict[str, bytes] = {}
        for key, value in zip(keys, values, strict=True):
            self._max_value_bytes = max(self._max_value_bytes, len(value))
            if not stored[key]:
                todo.setdefault(key, value)
        for chunk in self._chunks(todo):
            rc = self._call("put_batch", chunk, [todo[k] for k in chunk])
            if rc == 0:
                stored.update(dict.fromkeys(chunk, True))
            elif rc == NO_SPACE:  # the store is full: ask which keys made it
                stored.update(zip(chunk, self.batch_exists(chunk), strict=True))
            else:
                raise L3Error(f"Mooncake put_batch of {len(chunk)} keys returned "
                              f"{error_name(rc)} (master {self.master})")
        return [stored[k] for k in keys]

    def batch_remove(self, keys: list[str]) -> list[bool]:
        """Drop keys even if leased (a page that failed its checksum must go); True where
        the key is absent afterwards."""
        self._check_open()
        check_keys_values(keys)
        if not keys:
            return []
        return [c in (0, NOT_FOUND) for c in self._call("batch_remove", keys, True)]

    def _chunks(self, items: dict[str, bytes]) -> list[list[str]]:
        """Consecutive key groups whose values total at most half the local buffer."""
        limit = max(1, self.local_buffer_bytes // 2)
        chunks: list[list[str]] = []
        current: list[str] = []
        size = 0
        for key, value in items.items():
            if current and size + len(value) > limit:
                chunks.append(current)
                current, size = [], 0
            current.append(key)
            size += len(value)
        if current:
            chunks.append(current)
        return chunks

    def _call(self, method: str, *args: Any) -> Any:
        """One store call, counted in flight so that ``close`` never frees the store
        under it (a call abandoned at its deadline may still be running)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("MooncakeL3 is closed")
            self._inflight += 1
        try:
            return getattr(self._store, method)(*args)
        finally:
            with self._lock:
                self._inflight -= 1
                self._lock.notify_all()
                last = self._closed and self._inflight == 0 and not self._store_closed
                self._store_closed |= last
            if last:
                self._store.close()

    def close(self, wait_s: float = 5.0) -> None:
        """Close once no store call is in flight, waiting up to ``wait_s`` for calls that
        a deadline abandoned (a call to a dead master fails after ~4.3 s, measured); past
        that, the last of them closes it when it returns.
        (Closing the store under a running call crashes the process: measured, a
        segfault; leaving it open at exit can abort it.)"""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.wait_for(lambda: self._inflight == 0, wait_s)
            now = self._inflight == 0
            self._store_closed = now
        if now:
            self._store.close()
