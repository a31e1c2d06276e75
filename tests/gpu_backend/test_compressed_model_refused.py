"""The torch runtime holds plain K/V pages: a compressed-KV model (DeepSeek-V4) is refused
with the key named, never run with the wrong page size."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from gpu_backend.runtime import TorchRuntime  # noqa: E402
from hicache.modelspec import load_model_spec  # noqa: E402


def test_a_compressed_kv_model_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="deepseek-v4-flash-tp8.*compression"):
        TorchRuntime(load_model_spec("deepseek-v4-flash-tp8"), page_size=64,
                     device_pages={"full": 4}, host_pages={"full": 8}, warm_up=False)
