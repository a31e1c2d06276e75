"""``hicache-lab replay`` caches exactly what SGLang's caches cache on Mooncake traces.

traces/*.json: SGLang 0.5.23 on each trace, L1 only, in arrival order, written by
``scripts/record_sglang_oracle.py --trace FILE --page-size P --capacity-tokens ...
[--swa-window W] [--mamba-slots N] --trace-out ...`` (tests/oracle/README.md):
``RadixCache`` for FULL only (``UnifiedRadixCache`` gives the same numbers), a hybrid
``UnifiedRadixCache`` for the ``--swa-window``/``--mamba-slots`` replays. Cached token
counts must be equal, not close: before the tree followed SGLang, the synthetic trace at
page 512 was 2,048 tokens off at 2e6 tokens (0.23777 against 0.23773) and the
conversation trace at page 64 was 271,872 tokens off at 4e6 (0.18101 against 0.17914).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.cli import main
from tests.shared_data import TRACES, skip_reason

RECORDED = sorted((Path(__file__).parent / "traces").glob("*.json"))


def _case(path: Path):  # noqa: ANN202 - a pytest.param
    """FULL-only files run by default (~9 s); the hybrid ones (~15 s each) with -m slow:
    tests/oracle/recordings already hold SWA and MAMBA to SGLang on every decision."""
    slow = "radixcache" not in path.stem
    return pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("recorded", [_case(p) for p in RECORDED])
def test_replay_caches_exactly_what_sglang_caches(recorded: Path, capsys) -> None:  # noqa: ANN001
    sglang = json.loads(recorded.read_text())
    first = sglang[0]
    trace = TRACES / first["trace"]
    if not trace.exists():
        pytest.skip(skip_reason(trace))
    args = ["replay", "--trace", str(trace), "--format", "mooncake", "--page-size",
            str(first["page_size"]), "--json", "--capacity-tokens",
            ",".join(str(r["capacity_tokens"]) for r in sglang)]
    if first.get("swa_window"):
        args += ["--swa-window", str(first["swa_window"])]
    if first.get("mamba_slots"):
        args += ["--mamba-slots", str(first["mamba_slots"])]
    assert main(args) == 0
    ours = {r["capacity_tokens"]: r for r in
            map(json.loads, capsys.readouterr().out.splitlines())}
    for row in sglang:
        mine = ours[row["capacity_tokens"]]
        assert mine["prompt_tokens"] == row["prompt_tokens"]
        assert mine["cached_tokens"] == row["cached_tokens"], row["capacity_tokens"]
