"""HiCache configuration, named after SGLang's server flags (docs/SOURCES.md §2).

Invariant: a :class:`CacheConfig` that exists is valid: it is a frozen standard dataclass
whose fields carry their constraints (:mod:`hicache.schema.types`), checked on every
construction without a validation library (``1e6`` is read as an integer where one is
needed; ``True``, ``"32"`` and NaN are refused). :meth:`CacheConfig.from_mapping` validates
user input with pydantic (imported then) and names the source (file, section) and the key
in every :class:`ConfigError`, with a closest-name suggestion for unknown keys.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from hicache.schema.adapters import SchemaErrors, json_schema, validate
from hicache.schema.constraints import JsonSchema, Parse
from hicache.schema.errors import format_errors
from hicache.schema.plain import Plain, build, field_types
from hicache.schema.types import (
    Bool,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    Str,
    float_,
    int_,
)
from hicache.tree.options import TreeOptions

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
IO_BACKENDS = ("kernel", "direct")
MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
STORAGE_BACKENDS = (None, "mooncake", "file")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
L3_KEY_SCHEMES = ("chain64", "sha256")  # hicache.tiers.hashing.L3KeyScheme
EVICTION_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")
MOONCAKE_PROTOCOLS = ("tcp", "rdma")
DERIVED_KEYS = {"write_through_threshold": "it is derived from hicache_write_policy "
                                           "(hicache.tiers.write_policy)"}
EXTRA_KEY = "hicache_storage_backend_extra_config"


class ConfigError(ValueError):
    """A bad configuration value; the message names the source, the key and what is allowed."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        super().__init__(f"{source}: {key}: {problem}")


def _split(err: SchemaErrors, root: Any) -> tuple[str, str]:
    """(dotted key, problem) of the first error."""
    line = format_errors(err, source="", root=root)[0].removeprefix(": ")
    key, _, problem = line.partition(": ")
    return key, problem


@dataclass(frozen=True)
class StorageExtraConfig(Plain):
    """``--hicache-storage-backend-extra-config``: the keys that drive the L3 prefetch (with
    defaults) and the Mooncake store keys of SGLang's mooncake_store README (accepted
    whatever the backend, so a variant can switch the backend off without editing them)."""

    prefetch_threshold: NonNegInt = 256  # tokens not in L1/L2 needed before L3 is queried
    prefetch_timeout_base: NonNegFloat = 2.0  # seconds
    prefetch_timeout_per_ki_token: NonNegFloat = 0.1  # seconds per 1024 hit tokens
    prefetch_timeout_max: NonNegFloat = 30.0  # seconds
    local_hostname: Str | None = None
    metadata_server: Str | None = None
    master_server_address: Str | None = None
    protocol: Literal[MOONCAKE_PROTOCOLS] | None = None
    device_name: Str | None = None
    global_segment_size: NonNegInt | None = None
    local_buffer_size: NonNegInt | None = None
    setup_timeout: PosFloat | None = None  # hicache-lab's: seconds a Mooncake setup may take

    def as_dict(self) -> dict[str, Any]:
        """The keys that are set (None-valued Mooncake keys left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


PREFETCH_EXTRA_DEFAULTS: dict[str, Any] = StorageExtraConfig().as_dict()
MOONCAKE_EXTRA_KEYS = tuple(k for k in field_types(StorageExtraConfig)
                            if k not in PREFETCH_EXTRA_DEFAULTS)


def _extra_mapping(raw: Any, source: str) -> Mapping[str, Any]:
    """The extra config as a mapping (a dict, a JSON object string or None)."""
    if raw is None:
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            raise ConfigError(source, EXTRA_KEY, f"invalid JSON ({e.msg} at char {e.pos})"
                              ) from None
    if not isinstance(raw, Mapping):
        raise ConfigError(source, EXTRA_KEY, f"expected a mapping or a JSON object, got {raw!r}")
    return {str(k): v for k, v in raw.items()}


def parse_extra_config(raw: Any, source: str) -> dict[str, Any]:
    """Validate the storage extra config (a dict or a JSON object string) with pydantic;
    fill prefetch defaults. Unknown keys raise (a typo would otherwise silently keep a
    default)."""
    mapping = _extra_mapping(raw, source)
    try:
        extra = validate(StorageExtraConfig, mapping)
    except SchemaErrors as e:
        key, problem = _split(e, StorageExtraConfig)
        raise ConfigError(source, f"{EXTRA_KEY}.{key}", problem) from None
    return extra.as_dict()


def _under_extra_key(fn: Any, v: Any) -> dict[str, Any]:
    try:
        return fn(v, "")
    except ConfigError as e:  # reported under hicache_storage_backend_extra_config
        raise ValueError(f"{e.key.removeprefix(EXTRA_KEY + '.')}: {e.problem}"
                         if e.key != EXTRA_KEY else e.problem) from None


def _extra_plain(raw: Any, source: str) -> dict[str, Any]:
    """:func:`parse_extra_config` without pydantic (plain construction)."""
    mapping = _extra_mapping(raw, source)
    try:
        return build(StorageExtraConfig, mapping).as_dict()
    except ValueError as e:
        key, _, problem = str(e).partition(": ")
        if key == "StorageExtraConfig":
            raise ConfigError(source, EXTRA_KEY, problem) from None
        raise ConfigError(source, f"{EXTRA_KEY}.{key}", problem) from None


def _extra_schema() -> dict[str, Any]:
    return {"anyOf": [json_schema(StorageExtraConfig),
                      {"type": "string", "description": "a JSON object"}]}


ExtraConfig = Annotated[
    dict[str, Any],
    Parse(lambda v: _under_extra_key(_extra_plain, v),
          edge=lambda v: _under_extra_key(parse_extra_config, v)),
    JsonSchema(_extra_schema),
]


@dataclass(frozen=True)
class CacheConfig(Plain):
    """One replica's cache settings. ``device_tokens`` (L1 capacity) is our addition: SGLang
    derives it from free GPU memory. ``hicache_size`` is GB per rank, 0 = use the ratio."""

    page_size: int_(ge=1, le=1 << 20) = 64
    device_tokens: PosInt = 131072
    enable_hierarchical_cache: Bool = False
    hicache_ratio: float_(gt=1.0) = 2.0
    hicache_size: NonNegFloat = 0.0
    hicache_write_policy: Literal[WRITE_POLICIES] = "write_through"
    hicache_io_backend: Literal[IO_BACKENDS] = "kernel"
    hicache_mem_layout: Literal[MEM_LAYOUTS] = "layer_first"
    hicache_storage_backend: Literal["mooncake", "file"] | None = None
    hicache_storage_prefetch_policy: Literal[PREFETCH_POLICIES] = "best_effort"
    hicache_storage_backend_extra_config: ExtraConfig = field(
        default_factory=lambda: dict(PREFETCH_EXTRA_DEFAULTS), hash=False
    )
    radix_eviction_policy: Literal[EVICTION_POLICIES] = "lru"
    enable_session_aware_eviction: Bool = False
    # what a session references for SWA windows and MAMBA states: its whole path (ours) or,
    # as SGLang's PR 29173, the window before its frontier / the frontier's state only
    session_coverage: Literal["path", "component"] = "path"
    # which inserts count a tree hit (write-through thresholds, LFU/SLRU read them): every
    # L1 insert walking a node (SGLang's HiRadixCache, including a request's own output
    # insert over its prompt) or each request once per node (SGLang 0.5.23's unified tree,
    # ``inserted_len``)
    hit_count: Literal["every_insert", "once_per_request"] = "every_insert"
    # host memory only stages GPU <-> L3 transfers, it is no cache tier (seed 000's
    # buffer_only); needs a storage backend and a write-through policy
    hicache_buffer_only: Bool = False
    load_back_threshold: NonNegInt = 10
    prefetch_batch_pages: PosInt = 128
    # how L3 page keys are made (ours; hicache.tiers.hashing). sha256: SGLang's chain,
    # sha256(previous digest || page tokens) as hex, what a store shared with SGLang (a real
    # Mooncake) needs. chain64 (default): block prompts' pages chain a 64-bit tuple hash per
    # page instead of a SHA-256 (conversations and other token lists keep SHA-256): a
    # simulated store only compares keys for equality, so results are the same unless two
    # different chains collide (about n**2 / 2**62 for n pages). The torch runtime, whose
    # stores are real, always uses sha256 (gpu_backend.driver.real_store_cache).
    l3_key_scheme: Literal[L3_KEY_SCHEMES] = "chain64"
    # departures from SGLang's tree decisions, all off by default (hicache.tree.options)
    tree_options: TreeOptions = TreeOptions()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hicache_buffer_only and self.hicache_storage_backend is None:
            raise ValueError("hicache_buffer_only: needs hicache_storage_backend (mooncake or "
                             "file): host memory only stages transfers to and from L3")
        if self.hicache_buffer_only and self.hicache_write_policy == "write_back":
            raise ValueError("hicache_buffer_only: needs write_through or "
                             "write_through_selective: with write_back nothing would reach "
                             "L3 before eviction")
        if self.device_tokens < self.page_size:
            raise ValueError(f"device_tokens: {self.device_tokens} < page_size "
                             f"{self.page_size}")

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any] | None, *, source: str = "<mapping>"
                     ) -> CacheConfig:
        """Validate a plain mapping (a scenario's ``cache`` section) with pydantic; errors name
        ``source``."""
        d = {} if d is None else d
        if not isinstance(d, Mapping):
            raise ConfigError(source, "cache", f"expected a mapping, got {type(d).__name__}")
        for k in d:
            if k in DERIVED_KEYS:
                raise ConfigError(source, str(k), f"cannot be set: {DERIVED_KEYS[k]}")
        try:
            return validate(cls, {str(k): v for k, v in d.items()})
        except SchemaErrors as e:
            key, problem = _split(e, cls)
            raise ConfigError(source, key, problem) from None

    # ---- derived values -------------------------------------------------------------------
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
