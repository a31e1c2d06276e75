"""The tree decides as SGLang 0.5.23 does: recorded SGLang results, replayed through ours.

Each file in recordings/ holds a seeded stream of inserts, matches (some locking their
result), request finishes (insert of a matched-and-locked prefix plus new pages, then
unlock), unlocks and evictions under memory pressure, with what SGLang's
``UnifiedRadixCache`` returned for each (matched lengths, inserted prefix lengths, MAMBA
duplicates, evicted FULL/SWA/MAMBA counts) and its state after each (evictable and
protected sizes per component, a digest of every node's span, components and locks).
``scripts/record_sglang_oracle.py`` re-records them (README.md here says how).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from oracle_replay import Mismatch, replay

RECORDINGS = sorted((Path(__file__).parent / "recordings").glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_recordings_cover_every_required_configuration() -> None:
    recs = [load(p) for p in RECORDINGS]
    configs = {(tuple(r["components"]), r["page_size"], r["swa_window"]) for r in recs}
    assert {(("full",), 1, None), (("full",), 16, None)} <= configs
    assert len({w for c, _, w in configs if c == ("full", "swa")}) >= 3  # several windows
    assert any(c == ("full", "mamba") for c, _, _ in configs)
    assert any(c == ("full", "swa", "mamba") for c, _, _ in configs)
    for r in recs:
        assert r["sglang"] == "0.5.23"
        kinds = {op[0] for op in r["ops"]}
        assert kinds == {"insert", "match", "finish", "unlock", "evict"}, r["name"]
        evicted = r["summary"]["evicted_full_swa_mamba"]
        assert evicted[0] > 0, f"{r['name']}: no FULL eviction under pressure"
        if "swa" in r["components"]:
            assert evicted[1] > 0
        if "mamba" in r["components"]:
            assert evicted[2] > 0


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_every_result_equals_sglangs(path: Path) -> None:
    r = replay(load(path))
    assert not r.held  # every lock the stream took was released
    assert all(not n.locks for n in r.tree.nodes.values())


def test_a_wrong_result_is_caught() -> None:
    """The replay compares for real: one recorded eviction count off by one fails."""
    rec = load(next(p for p in RECORDINGS if p.stem == "swa_p1_w4"))
    bad = copy.deepcopy(rec)
    i = next(i for i, op in enumerate(bad["ops"]) if op[0] == "evict" and op[4] > 0)
    bad["ops"][i][4] += 1
    with pytest.raises(Mismatch, match=f"op {i} "):
        replay(bad)
