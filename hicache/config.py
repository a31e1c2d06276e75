"""HiCache configuration, named after SGLang's server flags (docs/SOURCES.md §2).

Invariant: a :class:`CacheConfig` that exists is valid. Every field is checked in
``__post_init__``; :meth:`CacheConfig.from_mapping` adds unknown-key detection (with a
closest-name suggestion) and names the source (file, section) in every :class:`ConfigError`.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
IO_BACKENDS = ("kernel", "direct")
MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
STORAGE_BACKENDS = (None, "mooncake", "file")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
EVICTION_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")
MOONCAKE_PROTOCOLS = ("tcp", "rdma")

# Keys of --hicache-storage-backend-extra-config that drive the L3 prefetch (with defaults).
PREFETCH_EXTRA_DEFAULTS: dict[str, float | int] = {
    "prefetch_threshold": 256,  # tokens not in L1/L2 needed before L3 is queried
    "prefetch_timeout_base": 2.0,  # seconds
    "prefetch_timeout_per_ki_token": 0.1,  # seconds per 1024 hit tokens
    "prefetch_timeout_max": 30.0,  # seconds
}
# Mooncake store keys documented in SGLang's mooncake_store README (accepted whatever the
# backend, so a variant can switch the backend off without editing the extra config).
MOONCAKE_EXTRA_KEYS = (
    "local_hostname",
    "metadata_server",
    "master_server_address",
    "protocol",
    "device_name",
    "global_segment_size",
    "local_buffer_size",
)
DERIVED_KEYS = {"write_through_threshold": "it is derived from hicache_write_policy"}


class ConfigError(ValueError):
    """A bad configuration value; the message names the source, the key and what is allowed."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        super().__init__(f"{source}: {key}: {problem}")


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; allowed keys: {', '.join(sorted(known))}"


def _int(minimum: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer >= {minimum}, got {v!r}")
        if v < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {v}")
        return v

    return check


def _float(minimum: float, *, strict: bool = False) -> Callable[[Any], float]:
    op = ">" if strict else ">="

    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
            raise ValueError(f"expected a number {op} {minimum}, got {v!r}")
        if v < minimum or (strict and v == minimum) or math.isinf(v):
            raise ValueError(f"expected a finite number {op} {minimum}, got {v}")
        return float(v)

    return check


def _choice(options: tuple[Any, ...]) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in options or isinstance(v, bool):
            raise ValueError(f"got {v!r}; allowed values: {', '.join(map(repr, options))}")
        return v

    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


_EXTRA_CHECKS: dict[str, Callable[[Any], Any]] = {
    "prefetch_threshold": _int(0),
    "prefetch_timeout_base": _float(0.0),
    "prefetch_timeout_per_ki_token": _float(0.0),
    "prefetch_timeout_max": _float(0.0),
    "local_hostname": _str,
    "metadata_server": _str,
    "master_server_address": _str,
    "protocol": _choice(MOONCAKE_PROTOCOLS),
    "device_name": _str,
    "global_segment_size": _int(0),
    "local_buffer_size": _int(0),
}


def parse_extra_config(raw: Any, source: str) -> dict[str, Any]:
    """Validate the storage extra config (a dict or a JSON object string); fill prefetch
    defaults. Unknown keys raise (a typo would otherwise silently keep a default)."""
    key = "hicache_storage_backend_extra_config"
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            raise ConfigError(source, key, f"invalid JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(source, key, f"expected a mapping or a JSON object, got {raw!r}")
    out: dict[str, Any] = dict(PREFETCH_EXTRA_DEFAULTS)
    for k, v in raw.items():
        if k not in _EXTRA_CHECKS:
            raise ConfigError(source, f"{key}.{k}", _suggest(str(k), list(_EXTRA_CHECKS)))
        try:
            out[k] = _EXTRA_CHECKS[k](v)
        except ValueError as e:
            raise ConfigError(source, f"{key}.{k}", str(e)) from None
    return out


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "page_size": _int(1),
    "device_tokens": _int(1),
    "enable_hierarchical_cache": _bool,
    "hicache_ratio": _float(1.0, strict=True),
    "hicache_size": _float(0.0),
    "hicache_write_policy": _choice(WRITE_POLICIES),
    "hicache_io_backend": _choice(IO_BACKENDS),
    "hicache_mem_layout": _choice(MEM_LAYOUTS),
    "hicache_storage_backend": _choice(STORAGE_BACKENDS),
    "hicache_storage_prefetch_policy": _choice(PREFETCH_POLICIES),
    "radix_eviction_policy": _choice(EVICTION_POLICIES),
    "enable_session_aware_eviction": _bool,
    "hicache_buffer_only": _bool,
    "load_back_threshold": _int(0),
    "prefetch_batch_pages": _int(1),
}


@dataclass(frozen=True)
class CacheConfig:
    """One replica's cache settings. ``device_tokens`` (L1 capacity) is our addition: SGLang
    derives it from free GPU memory. ``hicache_size`` is GB per rank, 0 = use the ratio."""

    page_size: int = 64
    device_tokens: int = 131072
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0
    hicache_size: float = 0.0
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "kernel"
    hicache_mem_layout: str = "layer_first"
    hicache_storage_backend: str | None = None
    hicache_storage_prefetch_policy: str = "best_effort"
    hicache_storage_backend_extra_config: dict[str, Any] = field(
        default_factory=lambda: dict(PREFETCH_EXTRA_DEFAULTS), hash=False
    )
    radix_eviction_policy: str = "lru"
    enable_session_aware_eviction: bool = False
    # host memory only stages GPU <-> L3 transfers, it is no cache tier (seed 000's
    # buffer_only); needs a storage backend and a write-through policy
    hicache_buffer_only: bool = False
    load_back_threshold: int = 10
    prefetch_batch_pages: int = 128

    def __post_init__(self) -> None:
        self._validate("CacheConfig")

    def _validate(self, source: str) -> None:
        for name, check in _CHECKS.items():
            try:
                object.__setattr__(self, name, check(getattr(self, name)))
            except ValueError as e:
                raise ConfigError(source, name, str(e)) from None
        extra = parse_extra_config(self.hicache_storage_backend_extra_config, source)
        object.__setattr__(self, "hicache_storage_backend_extra_config", extra)
        if self.hicache_buffer_only and self.hicache_storage_backend is None:
            raise ConfigError(source, "hicache_buffer_only",
                              "needs hicache_storage_backend (mooncake or file): host memory "
                              "only stages transfers to and from L3")
        if self.hicache_buffer_only and self.hicache_write_policy == "write_back":
            raise ConfigError(source, "hicache_buffer_only",
                              "needs write_through or write_through_selective: with "
                              "write_back nothing would reach L3 before eviction")
        if self.device_tokens < self.page_size:
            raise ConfigError(
                source, "device_tokens", f"{self.device_tokens} < page_size {self.page_size}"
            )

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None, *, source: str = "<mapping>") -> CacheConfig:
        """Build from a plain mapping (a scenario's ``cache`` section); errors name ``source``."""
        d = {} if d is None else d
        if not isinstance(d, Mapping):
            raise ConfigError(source, "cache", f"expected a mapping, got {type(d).__name__}")
        known = [f.name for f in fields(cls)]
        for k in d:
            if k in DERIVED_KEYS:
                raise ConfigError(source, k, f"cannot be set: {DERIVED_KEYS[k]}")
            if k not in known:
                raise ConfigError(source, str(k), _suggest(str(k), known))
        try:
            return cls(**d)
        except ConfigError as e:  # re-attribute to the caller's source
            raise ConfigError(source, e.key, e.problem) from None

    # ---- derived values -------------------------------------------------------------------
    @property
    def write_through_threshold(self) -> int:
        """Hits before an L1 node is backed up to L2: 1 for write_through, else 2 (as SGLang)."""
        return 1 if self.hicache_write_policy == "write_through" else 2

    @property
    def effective_mem_layout(self) -> str:
        """SGLang switches page_first to layer_first under the direct IO backend."""
        if self.hicache_mem_layout == "page_first" and self.hicache_io_backend == "direct":
            return "layer_first"
        return self.hicache_mem_layout

    @property
    def prefetch_threshold(self) -> int:
        return int(self.hicache_storage_backend_extra_config["prefetch_threshold"])

    @property
    def prefetch_threshold_pages(self) -> int:
        """The prefetch threshold in pages, rounded up, and never below one page."""
        return max(1, -(-self.prefetch_threshold // self.page_size))

    @property
    def prefetch_timeout_base(self) -> float:
        return float(self.hicache_storage_backend_extra_config["prefetch_timeout_base"])

    @property
    def prefetch_timeout_per_ki_token(self) -> float:
        return float(self.hicache_storage_backend_extra_config["prefetch_timeout_per_ki_token"])

    @property
    def prefetch_timeout_max(self) -> float:
        return float(self.hicache_storage_backend_extra_config["prefetch_timeout_max"])

    def host_tokens(self, bytes_per_token: int | None = None) -> int:
        """L2 capacity in tokens, floored to whole pages: ``hicache_size`` GB (1e9 bytes) /
        bytes per token when set, else ``device_tokens * hicache_ratio``. Must exceed L1."""
        if self.hicache_size > 0:
            if not bytes_per_token or bytes_per_token <= 0:
                raise ValueError("hicache_size is set: host_tokens needs bytes_per_token > 0")
            tokens = int(self.hicache_size * 1e9 // bytes_per_token)
        else:
            tokens = int(self.device_tokens * self.hicache_ratio)
        tokens -= tokens % self.page_size
        if tokens <= self.device_tokens:
            raise ValueError(
                f"host pool of {tokens} tokens must be larger than the device pool "
                f"({self.device_tokens} tokens)"
            )
        return tokens
