"""Zero-time replay: what hit rate would a cache of this size get on this trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.cli import main
from hicache.config import CacheConfig
from hicache.replay.engine import L3Set, ReplayCache, replay
from hicache.workload.request import Request
from tests.shared_data import SYNTHETIC_TRACE, skip_reason

TRACE = SYNTHETIC_TRACE


def req(rid: int, tokens: list[int]) -> Request:
    return Request(rid=rid, arrival=float(rid), tokens=tokens, output_len=1)


def cache(device_tokens: int, **kw) -> ReplayCache:
    cfg = {"page_size": 4, "device_tokens": device_tokens} | kw
    return ReplayCache(CacheConfig.from_mapping(cfg))


def test_a_repeated_prompt_hits_every_full_page() -> None:
    recs = replay([req(0, list(range(10))), req(1, list(range(10)))], cache(64))
    assert [r.device_hit for r in recs] == [0, 8]  # 2 full pages of 4; the partial page never


def test_a_shared_prefix_hits_only_up_to_the_divergence_page() -> None:
    a = list(range(16))
    b = list(range(6)) + [99] * 10
    recs = replay([req(0, a), req(1, b)], cache(64))
    assert recs[1].device_hit == 4


def test_lru_evicts_the_oldest_prompt_when_l1_is_full() -> None:
    a, b, c = ([k * 100 + i for i in range(8)] for k in range(3))
    recs = replay([req(0, a), req(1, b), req(2, c), req(3, a), req(4, c)], cache(16))
    assert [r.device_hit for r in recs] == [0, 0, 0, 0, 8]


def test_l2_catches_what_l1_evicts_and_load_back_counts_as_host_hit() -> None:
    a, b = ([k * 100 + i for i in range(16)] for k in range(2))
    c = cache(16, enable_hierarchical_cache=True, hicache_ratio=4)
    recs = replay([req(0, a), req(1, b), req(2, a)], c)
    assert (recs[2].device_hit, recs[2].host_hit) == (0, 16)


def test_l3_serves_prefixes_that_left_l1_and_l2() -> None:
    prompts = [[k * 1000 + i for i in range(512)] for k in range(4)]
    c = ReplayCache(CacheConfig.from_mapping(
        {"page_size": 64, "device_tokens": 512, "enable_hierarchical_cache": True,
         "hicache_ratio": 2}), l3=L3Set())
    recs = replay([req(i, p) for i, p in enumerate(prompts + prompts[:1])], c)
    last = recs[-1]
    assert last.l3_hit == 512 and last.device_hit == last.host_hit == 0


def test_hit_rate_is_summed_over_tokens_not_averaged(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [{"arrival": 0, "tokens": list(range(8)), "output_len": 1},
            {"arrival": 1, "tokens": list(range(8)), "output_len": 1},
            {"arrival": 2, "tokens": list(range(100, 132)), "output_len": 1}]
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "out"
    assert main(["replay", "--trace", str(trace), "--format", "tokens", "--page-size", "4",
                 "--capacity-tokens", "1000", "--json", "--out", str(out)]) == 0
    lines = (out / "requests.csv").read_text().splitlines()
    assert len(lines) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hit_rate"] == pytest.approx(8 / 48)  # not mean(0, 1, 0) = 1/3


def test_a_malformed_line_names_file_and_line(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"arrival": 0, "tokens": [1,2], "output_len": 1}\n{"arrival": 0}\n')
    assert main(["replay", "--trace", str(trace), "--format", "tokens"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err


@pytest.mark.skipif(not TRACE.exists(), reason=skip_reason(TRACE))
def test_mooncake_trace_hit_rate_grows_with_capacity(capsys) -> None:
    rates = []
    for cap in (100_000, 2_000_000):
        assert main(["replay", "--trace", str(TRACE), "--format", "mooncake", "--max-requests",
                     "600", "--capacity-tokens", str(cap), "--json"]) == 0
        rates.append(json.loads(capsys.readouterr().out)["hit_rate"])
    assert 0 <= rates[0] < rates[1] <= 1


def test_session_aware_replay_keeps_an_open_sessions_prefix() -> None:
    # L1 of 4 pages. Session s holds prompt a; b and c (no session) come after it. With plain
    # LRU a is the oldest and goes; with session-aware eviction b goes first and a survives.
    a, b, c = ([k * 100 + i for i in range(8)] for k in range(3))
    reqs = [Request(0, 0.0, a, 1, session_id="s"), Request(1, 1.0, b, 1),
            Request(2, 2.0, c, 1), Request(3, 3.0, a, 1, session_id="s")]

    def last_hit(session_aware: bool) -> int:
        return replay(reqs, cache(16, enable_session_aware_eviction=session_aware))[-1].device_hit

    assert last_hit(False) == 0
    assert last_hit(True) == 8


def test_a_capacity_list_prints_one_json_line_per_size(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"arrival": i, "tokens": list(range(16)),
                                           "output_len": 1}) for i in range(3)))
    assert main(["replay", "--trace", str(trace), "--format", "tokens", "--page-size", "4",
                 "--capacity-tokens", "4,1e3", "--json", "--out", str(tmp_path / "o")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["capacity_tokens"] for r in rows] == [4, 1000]
    assert rows[0]["hit_rate"] < rows[1]["hit_rate"] == pytest.approx(32 / 48)
    assert (tmp_path / "o" / "capacity_1000" / "requests.csv").exists()
