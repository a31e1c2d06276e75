"""SGLang server args (field names, :mod:`hicache.sglang.launch`) -> scenario sections.

Every field is either mapped (``MAPPED``), refused with a reason (``REFUSED``: the server
would behave in a way we do not model, so a number from us would mislead), or ignored and
named (it does not change caching or scheduling: ports, tokenizer, logging, ...). Where
SGLang derives a value we cannot (its default ``mem_fraction_static``, say), the value we
assume is named in :attr:`Mapped.assumed`.

L1 size, as SGLang sizes its pool: ``--max-total-tokens`` when given; else
``gpu_memory x mem_fraction_static - weights`` per rank, divided by the KV bytes a token
takes on one rank (the caller supplies the GPU memory, weights and KV bytes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache.units import SizeError, parse_size

# SGLang's default when --mem-fraction-static is absent depends on GPU memory, TP and
# features (server_args resolution); this is its typical value on 80-141 GB GPUs.
DEFAULT_MEM_FRACTION = 0.85
SUPPORTED_BACKENDS = ("file", "mooncake")
SUPPORTED_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
SUPPORTED_EVICTION = ("lru", "lfu", "slru", "priority")
CACHE_FIELDS = ("page_size", "hicache_ratio", "hicache_size", "hicache_write_policy",
                "hicache_io_backend", "hicache_mem_layout", "hicache_storage_backend",
                "hicache_storage_prefetch_policy", "radix_eviction_policy")
MAPPED = frozenset({
    *CACHE_FIELDS, "model_path", "tp_size", "dp_size", "max_total_tokens",
    "mem_fraction_static", "enable_hierarchical_cache", "hicache_host_memory_mode",
    "hicache_storage_backend_extra_config", "enable_session_radix_cache",
    "max_running_requests", "chunked_prefill_size", "disable_overlap_schedule",
    "kv_cache_dtype", "dtype",
})  # fmt: skip
REFUSED = {
    "disable_radix_cache": "without a radix cache there is no prefix reuse to study",
    "pp_size": "pipeline parallelism is not modelled",
    "enable_dp_attention": "DP attention is not modelled",
    "enable_lmcache": "LMCache is not modelled (use --hicache-storage-backend)",
}


_OFF = ("false", "0", "1", "none", "")  # a flag left off (or pp/dp size 1)


class MappingError(ValueError):
    """A server arg we cannot honour; the message names the flag."""


@dataclass
class Mapped:
    """What the server args set: scenario sections, and what was ignored or assumed."""

    cache: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    replicas: int = 1
    tensor_parallel: int = 1
    mem_fraction_static: float | None = None
    ignored: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _int(fields: Mapping[str, Any], name: str, minimum: int) -> int:
    try:
        return parse_size(str(fields[name]).strip(), minimum=minimum, what=flag(name))
    except SizeError as e:
        raise MappingError(str(e)) from None


def _float(fields: Mapping[str, Any], name: str, lo: float, hi: float | None = None) -> float:
    try:
        v = float(fields[name])
    except (TypeError, ValueError):
        raise MappingError(f"{flag(name)}: expected a number, got {fields[name]!r}") from None
    if not (lo <= v and (hi is None or v <= hi)) or v != v:
        raise MappingError(f"{flag(name)}: {v} out of range [{lo}, {hi or 'inf'}]")
    return v


def _bool(v: Any) -> bool:
    return v is True or str(v).lower() in ("true", "1", "yes")


def _choice(fields: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    v = str(fields[name])
    if v not in allowed:
        raise MappingError(f"{flag(name)} {v}: not modelled here; supported: "
                           f"{', '.join(allowed)}")
    return v


def _extra_config(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    text = str(raw)
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as e:
            raise MappingError(f"--hicache-storage-backend-extra-config {raw}: cannot read "
                               f"({e.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        import yaml

        data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise MappingError("--hicache-storage-backend-extra-config: expected a JSON object")
    return data


def map_server_args(fields: Mapping[str, Any]) -> Mapped:
    """The cache / scheduler keys and counts the server args set (see module docstring)."""
    for name, why in REFUSED.items():
        v = fields.get(name)
        if v is True or (v not in (None, False) and str(v).lower() not in _OFF):
            raise MappingError(f"{flag(name)}: {why}")
    m = Mapped()
    c = m.cache
    if "page_size" in fields:
        c["page_size"] = _int(fields, "page_size", 1)
    else:
        c["page_size"] = 1
        m.assumed.append("--page-size 1 (SGLang's default for most attention backends)")
    hier = _bool(fields.get("enable_hierarchical_cache", False))
    c["enable_hierarchical_cache"] = hier
    if "hicache_ratio" in fields:
        c["hicache_ratio"] = _float(fields, "hicache_ratio", 1e-9)
    if "hicache_size" in fields:
        c["hicache_size"] = _float(fields, "hicache_size", 0.0)
    for name in ("hicache_write_policy", "hicache_storage_prefetch_policy"):
        if name in fields:
            c[name] = str(fields[name])
    if "hicache_io_backend" in fields:
        c["hicache_io_backend"] = _choice(fields, "hicache_io_backend", ("kernel", "direct"))
    if "hicache_mem_layout" in fields:
        c["hicache_mem_layout"] = _choice(fields, "hicache_mem_layout", SUPPORTED_LAYOUTS)
    elif hier:
        c["hicache_mem_layout"] = "page_first"  # SGLang 0.5.23's default
    if fields.get("hicache_storage_backend") not in (None, "None", "none"):
        c["hicache_storage_backend"] = _choice(fields, "hicache_storage_backend",
                                               SUPPORTED_BACKENDS)
        c.setdefault("hicache_storage_prefetch_policy", "timeout")  # SGLang's default
    if fields.get("hicache_storage_backend_extra_config"):
        c["hicache_storage_backend_extra_config"] = _extra_config(
            fields["hicache_storage_backend_extra_config"])
    if fields.get("hicache_host_memory_mode", "cache") == "buffer_only":
        c["hicache_buffer_only"] = True
        if "hicache_ratio" not in fields and "hicache_size" not in fields:
            c["hicache_ratio"] = 1.2  # SGLang's buffer_only default
    if "radix_eviction_policy" in fields:
        c["radix_eviction_policy"] = _choice(fields, "radix_eviction_policy",
                                             SUPPORTED_EVICTION)
    if _bool(fields.get("enable_session_radix_cache", False)):
        c["enable_session_aware_eviction"] = True
    if "max_total_tokens" in fields:
        c["device_tokens"] = _int(fields, "max_total_tokens", 1)
    elif "mem_fraction_static" in fields:
        m.mem_fraction_static = _float(fields, "mem_fraction_static", 1e-9, 1.0)
    else:
        m.mem_fraction_static = DEFAULT_MEM_FRACTION
        m.assumed.append(f"--mem-fraction-static {DEFAULT_MEM_FRACTION} (SGLang derives its "
                         "default from GPU memory; give --max-total-tokens to be exact)")
    _scheduler(fields, m)
    m.tensor_parallel = _int(fields, "tp_size", 1) if "tp_size" in fields else 1
    m.replicas = _int(fields, "dp_size", 1) if "dp_size" in fields else 1
    if str(fields.get("kv_cache_dtype", "auto")) not in ("auto", "bf16", "bfloat16"):
        m.ignored.append(f"--kv-cache-dtype {fields['kv_cache_dtype']} (KV bytes follow the "
                         "model's dtype here)")
    m.ignored += sorted(flag(k) for k in fields if k not in MAPPED and k not in REFUSED)
    return m


def _scheduler(fields: Mapping[str, Any], m: Mapped) -> None:
    s = m.scheduler
    if "max_running_requests" in fields:
        s["max_running_requests"] = _int(fields, "max_running_requests", 1)
    else:
        m.assumed.append("--max-running-requests: hicache-lab's default (SGLang derives it "
                         "from the pool size)")
    if "chunked_prefill_size" in fields:
        size = int(float(fields["chunked_prefill_size"]))
        if size == -1:
            m.ignored.append("--chunked-prefill-size -1 (chunking stays on: prompts are "
                             "prefilled in chunks of hicache-lab's default)")
        else:
            s["chunked_prefill_size"] = _int(fields, "chunked_prefill_size", 1)
    if _bool(fields.get("disable_overlap_schedule", False)):
        s["overlap"] = False


def device_tokens(gpu_memory_bytes: int, fraction: float, weight_bytes: int,
                  kv_bytes_per_token: int) -> int:
    """SGLang's pool size per rank: (memory x fraction - weights) / KV bytes per token."""
    pool = gpu_memory_bytes * fraction - weight_bytes
    if pool <= 0 or kv_bytes_per_token <= 0:
        raise MappingError(f"--mem-fraction-static {fraction}: {fraction:.0%} of "
                           f"{gpu_memory_bytes / 2**30:.0f} GiB does not hold the weights "
                           f"({weight_bytes / 2**30:.1f} GiB per rank); no KV pool is left")
    return int(pool // kv_bytes_per_token)
