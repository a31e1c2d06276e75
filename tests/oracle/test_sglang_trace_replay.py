"""``hicache-lab replay`` caches exactly what SGLang's RadixCache caches on Mooncake traces.

SGLang 0.5.23's ``RadixCache`` (its ``UnifiedRadixCache`` gives the same numbers) replayed
each trace, L1 only, in arrival order: traces/*_radixcache.json, written by
``scripts/record_sglang_oracle.py --trace FILE --page-size P --capacity-tokens ...
--trace-out ...`` (tests/oracle/README.md). Cached token counts must be equal, not close:
before the tree followed SGLang, the synthetic trace at page 512 was 2,048 tokens off at
2e6 tokens (0.23777 against 0.23773) and the conversation trace at page 64 was 271,872
tokens off at 4e6 (0.18101 against 0.17914).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.cli import main

_SHARED = Path(__file__).resolve().parents[3] / "shared"  # beside the repository (CI)
if not _SHARED.exists():
    _SHARED = Path("/work/shared")  # where this workplace keeps it
RECORDED = sorted((Path(__file__).parent / "traces").glob("*_radixcache.json"))


@pytest.mark.parametrize("recorded", RECORDED, ids=[p.stem for p in RECORDED])
def test_replay_caches_exactly_what_sglang_caches(recorded: Path, capsys) -> None:  # noqa: ANN001
    sglang = json.loads(recorded.read_text())
    trace = _SHARED / "traces/mooncake" / sglang[0]["trace"]
    if not trace.exists():
        pytest.skip("shared traces not present")
    sizes = [r["capacity_tokens"] for r in sglang]
    assert main(["replay", "--trace", str(trace), "--format", "mooncake", "--page-size",
                 str(sglang[0]["page_size"]), "--capacity-tokens", ",".join(map(str, sizes)),
                 "--json"]) == 0
    ours = {r["capacity_tokens"]: r for r in
            map(json.loads, capsys.readouterr().out.splitlines())}
    for row in sglang:
        mine = ours[row["capacity_tokens"]]
        assert mine["prompt_tokens"] == row["prompt_tokens"]
        assert mine["cached_tokens"] == row["cached_tokens"], row["capacity_tokens"]
