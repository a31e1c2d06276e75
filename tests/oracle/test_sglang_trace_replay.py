"""``hicache-lab replay`` equals SGLang's RadixCache on the Mooncake synthetic trace.

SGLang 0.5.23's ``RadixCache`` (and its ``UnifiedRadixCache``, which gives the same
numbers) replayed the trace at page size 512, L1 only, in arrival order:
traces/mooncake_synthetic_p512_radixcache.json, written by
``scripts/record_sglang_oracle.py --trace ... --page-size 512 --capacity-tokens
1e5,1e6,2e6,4e6 --trace-out ...`` (tests/oracle/README.md). The cached token counts must
be equal, not close: at 2e6 tokens the tree before it followed SGLang differed by 2,048
tokens (0.23777 against 0.23773).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.cli import main

_SHARED = Path(__file__).resolve().parents[3] / "shared"  # beside the repository (CI)
if not _SHARED.exists():
    _SHARED = Path("/work/shared")  # where this workplace keeps it
TRACE = _SHARED / "traces/mooncake/mooncake_synthetic_trace.jsonl"
SGLANG = json.loads(
    (Path(__file__).parent / "traces/mooncake_synthetic_p512_radixcache.json").read_text())
DEFAULT = (1_000_000, 2_000_000)  # the other sizes run with -m slow


def _replay(capacities: list[int], capsys) -> dict[int, dict]:  # noqa: ANN001
    assert main(["replay", "--trace", str(TRACE), "--format", "mooncake", "--page-size",
                 "512", "--capacity-tokens", ",".join(map(str, capacities)), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return {r["capacity_tokens"]: r for r in rows}


def _check(capacities: list[int], capsys) -> None:  # noqa: ANN001
    ours = _replay(capacities, capsys)
    for cap in capacities:
        sglang = next(r for r in SGLANG if r["capacity_tokens"] == cap)
        assert ours[cap]["prompt_tokens"] == sglang["prompt_tokens"]
        assert ours[cap]["cached_tokens"] == sglang["cached_tokens"], cap


@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
def test_replay_caches_exactly_what_sglang_caches(capsys) -> None:  # noqa: ANN001
    _check(list(DEFAULT), capsys)


@pytest.mark.slow
@pytest.mark.skipif(not TRACE.exists(), reason="shared traces not present")
def test_replay_caches_exactly_what_sglang_caches_at_every_recorded_size(capsys) -> None:  # noqa: ANN001
    _check([r["capacity_tokens"] for r in SGLANG if r["capacity_tokens"] not in DEFAULT],
           capsys)
