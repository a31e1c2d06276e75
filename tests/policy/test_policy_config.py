"""CacheConfig: SGLang's flag names and defaults, validation errors that name source and key."""

import json

import pytest

from hicache.config import CacheConfig, ConfigError


def test_defaults_mirror_sglang_flags_and_reference():
    c = CacheConfig()
    assert c.page_size == 64
    assert c.enable_hierarchical_cache is False
    assert c.hicache_ratio == 2.0 and c.hicache_size == 0
    assert c.hicache_write_policy == "write_through"
    assert c.hicache_io_backend == "kernel"
    assert c.hicache_mem_layout == "layer_first"
    assert c.hicache_storage_backend is None
    assert c.hicache_storage_prefetch_policy == "best_effort"
    assert c.radix_eviction_policy == "lru"
    assert c.load_back_threshold == 10
    assert c.prefetch_batch_pages == 128
    assert (c.prefetch_threshold, c.prefetch_timeout_base) == (256, 2.0)
    assert (c.prefetch_timeout_per_ki_token, c.prefetch_timeout_max) == (0.1, 30.0)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        CacheConfig().page_size = 32  # type: ignore[misc]


def test_write_through_threshold_cannot_be_set():
    with pytest.raises(ConfigError, match="write_through_threshold: cannot be set"):
        CacheConfig.from_mapping({"write_through_threshold": 1}, source="s.yaml")


def test_unknown_key_names_source_key_and_suggests_the_closest_name():
    with pytest.raises(ConfigError) as e:
        CacheConfig.from_mapping({"hicache_ratoi": 3}, source="exp.yaml: cache")
    msg = str(e.value)
    assert msg.startswith("exp.yaml: cache: hicache_ratoi: unknown key")
    assert "did you mean 'hicache_ratio'?" in msg
    assert e.value.key == "hicache_ratoi" and e.value.source == "exp.yaml: cache"


def test_bad_choice_lists_the_allowed_values():
    with pytest.raises(ConfigError) as e:
        CacheConfig.from_mapping({"radix_eviction_policy": "random"}, source="a.yaml")
    msg = str(e.value)
    assert "a.yaml: radix_eviction_policy: got 'random'" in msg
    for p in ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru"):
        assert repr(p) in msg


@pytest.mark.parametrize(
    "key, value",
    [
        ("page_size", 0),
        ("page_size", 16.5),
        ("page_size", "16"),
        ("hicache_ratio", float("nan")),
        ("hicache_size", float("inf")),
        ("page_size", True),
        ("hicache_ratio", 1.0),
        ("hicache_ratio", 0.5),
        ("hicache_size", -1),
        ("hicache_write_policy", "write_around"),
        ("hicache_io_backend", "memcpy"),
        ("hicache_mem_layout", "head_first"),
        ("hicache_storage_backend", "hf3fs"),
        ("hicache_storage_prefetch_policy", "eager"),
        ("enable_hierarchical_cache", "yes"),
        ("load_back_threshold", -1),
        ("device_tokens", 0),
    ],
)
def test_bad_values_raise_config_error_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"^src: {key}: "):
        CacheConfig.from_mapping({key: value}, source="src")


def test_direct_construction_is_validated_too():
    with pytest.raises(ValueError, match="hicache_ratio"):
        CacheConfig(hicache_ratio=1.0)


def test_integral_numbers_such_as_yaml_1e6_are_integers():
    c = CacheConfig.from_mapping({"device_tokens": 1e6, "page_size": 64.0})
    assert c.device_tokens == 1_000_000 and type(c.device_tokens) is int


def test_extra_config_accepts_a_json_string_as_on_the_sglang_command_line():
    raw = json.dumps({"prefetch_timeout_base": 1, "prefetch_timeout_max": 10})
    c = CacheConfig.from_mapping({"hicache_storage_backend_extra_config": raw})
    assert c.prefetch_timeout_base == 1.0 and c.prefetch_timeout_max == 10.0
    assert c.prefetch_threshold == 256  # unspecified keys keep their defaults


def test_extra_config_accepts_documented_mooncake_keys():
    extra = {"master_server_address": "127.0.0.1:50051", "protocol": "tcp"}
    c = CacheConfig.from_mapping(
        {"hicache_storage_backend": "mooncake", "hicache_storage_backend_extra_config": extra}
    )
    assert c.hicache_storage_backend_extra_config["protocol"] == "tcp"


def test_extra_config_typo_and_bad_json_name_the_key():
    key = "hicache_storage_backend_extra_config"
    with pytest.raises(ConfigError, match=f"{key}.prefetch_treshold.*'prefetch_threshold'"):
        CacheConfig.from_mapping({key: {"prefetch_treshold": 1}}, source="s")
    with pytest.raises(ConfigError, match=f"s: {key}: invalid JSON"):
        CacheConfig.from_mapping({key: "{prefetch_threshold: 1"}, source="s")
    with pytest.raises(ConfigError, match=f"{key}.protocol: got 'udp'"):
        CacheConfig.from_mapping({key: {"protocol": "udp"}}, source="s")


def test_host_tokens_is_device_tokens_times_ratio_by_default():
    assert CacheConfig(device_tokens=1024, page_size=64, hicache_ratio=2.0).host_tokens() == 2048


def test_host_tokens_floors_to_whole_pages():
    assert CacheConfig(device_tokens=1000, page_size=64, hicache_ratio=1.5).host_tokens() == 1472


def test_host_tokens_from_hicache_size_in_gb_per_rank():
    c = CacheConfig(device_tokens=64, page_size=64, hicache_size=1)
    assert c.host_tokens(bytes_per_token=131072) == 7616  # 1e9 // 128 KiB = 7629 -> 119 pages
    with pytest.raises(ValueError, match="bytes_per_token"):
        c.host_tokens()


def test_host_pool_must_exceed_the_device_pool():
    c = CacheConfig(device_tokens=1 << 20, hicache_size=1)
    with pytest.raises(ValueError, match="larger than the device pool"):
        c.host_tokens(bytes_per_token=131072)


@pytest.mark.parametrize("threshold, page, pages", [(256, 64, 4), (100, 64, 2), (0, 64, 1)])
def test_prefetch_threshold_pages_rounds_up_to_at_least_one_page(threshold, page, pages):
    c = CacheConfig(
        page_size=page, hicache_storage_backend_extra_config={"prefetch_threshold": threshold}
    )
    assert c.prefetch_threshold_pages == pages


def test_page_first_layout_falls_back_to_layer_first_with_direct_io():
    c = CacheConfig(hicache_mem_layout="page_first", hicache_io_backend="direct")
    assert c.effective_mem_layout == "layer_first"
    assert CacheConfig(hicache_mem_layout="page_first").effective_mem_layout == "page_first"
