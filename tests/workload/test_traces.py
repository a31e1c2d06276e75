"""Trace readers: the real Mooncake trace, the project's tokens format, malformed lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.workload.request import Request
from hicache.workload.traces import (
    TraceFormatError,
    detect_format,
    iter_mooncake_trace,
    load_trace,
    write_token_trace,
)
from tests.shared_data import TRACES, skip_reason

MOONCAKE = TRACES
CONVERSATION = MOONCAKE / "mooncake_conversation_trace.jsonl"
needs_trace = pytest.mark.skipif(not CONVERSATION.exists(), reason=skip_reason(CONVERSATION))


@needs_trace
def test_real_conversation_trace_loads_with_published_stats():
    reqs = load_trace(CONVERSATION)  # its speed: benchmarks/sim_speed.py (no wall clock here)
    assert len(reqs) == 12_031
    mean_in = sum(r.prompt_len for r in reqs) / len(reqs)
    mean_out = sum(r.output_len for r in reqs) / len(reqs)
    assert mean_in == pytest.approx(12_035, abs=1)
    assert mean_out == pytest.approx(343, abs=1)
    assert [r.rid for r in reqs[:3]] == [0, 1, 2]
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:], strict=False))
    assert reqs[-1].arrival == pytest.approx(3536.999)  # last timestamp 3,536,999 ms


@needs_trace
def test_shared_hash_id_means_shared_tokens():
    reqs = load_trace(CONVERSATION, max_requests=2)
    a, b = reqs  # both start with hash id 0, then differ
    assert a.tokens.hash_ids[0] == b.tokens.hash_ids[0] == 0
    assert list(a.tokens[:512]) == list(b.tokens[:512]) == list(range(512))
    assert a.tokens[512] != b.tokens[512]


def mooncake_line(**kw) -> str:
    obj = {"timestamp": 1500, "input_length": 1100, "output_length": 7,
           "hash_ids": [4, 9, 2]}
    obj.update(kw)
    return json.dumps(obj)


def write(tmp_path: Path, lines: list[str], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_mooncake_block_tokens_and_partial_last_block(tmp_path):
    (r,) = load_trace(write(tmp_path, [mooncake_line()]))
    assert r.arrival == 1.5 and r.output_len == 7 and r.prompt_len == 1100
    naive = (list(range(4 * 512, 5 * 512)) + list(range(9 * 512, 10 * 512))
             + list(range(2 * 512, 2 * 512 + 1100 - 1024)))  # last block: 76 tokens
    assert list(r.tokens) == naive
    for a, b, s in [(0, 1100, 1), (500, 530, 1), (1020, 1100, 1), (3, 900, 7), (-10, None, 1),
                    (600, 10, 1)]:
        assert list(r.tokens[a:b:s]) == naive[a:b:s]
    assert r.tokens[-1] == naive[-1] and r.tokens[513] == naive[513]
    with pytest.raises(IndexError):
        r.tokens[1100]


def test_tokens_format_round_trip(tmp_path):
    reqs = [Request(0, 0.0, [5, 6, 7], 3),
            Request(1, 0.25, [5, 6, 8, 9], 2, session_id="s", client=4, round=1,
                    close_session=True)]
    p = tmp_path / "own.jsonl"
    assert write_token_trace(p, reqs) == 2
    assert detect_format(p) == "tokens"
    back = load_trace(p)
    assert [(r.rid, r.arrival, list(r.tokens), r.output_len, r.session_id, r.client, r.round,
             r.close_session) for r in back] == [
        (0, 0.0, [5, 6, 7], 3, None, -1, -1, False),
        (1, 0.25, [5, 6, 8, 9], 2, "s", 4, 1, True)]


def test_blank_lines_are_skipped_and_line_numbers_stay_physical(tmp_path):
    p = write(tmp_path, [mooncake_line(), "", mooncake_line(output_length=-1)])
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:3: field 'output_length'"):
        load_trace(p)


BAD_MOONCAKE = [
    ("{not json", "bad JSON", None),
    ("[1, 2]", "expected a JSON object", None),
    (mooncake_line(hash_ids=[4, 9]), "ceil", "hash_ids"),
    (mooncake_line(hash_ids=[4, 9, 2, 5]), "ceil", "hash_ids"),
    (mooncake_line(hash_ids=[4, -9, 2]), "negative", "hash_ids"),
    (mooncake_line(hash_ids=[4, "9", 2]), "list of integers", "hash_ids"),
    (mooncake_line(input_length="1100"), "integer", "input_length"),
    (mooncake_line(input_length=1100.0), "integer", "input_length"),
    (mooncake_line(output_length=-3), ">= 0", "output_length"),
    (mooncake_line(timestamp=-1), ">= 0", "timestamp"),
    (mooncake_line(timestamp=True), "number", "timestamp"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1}', "missing key", "hash_ids"),
]


@pytest.mark.parametrize("bad,problem,field", BAD_MOONCAKE)
def test_malformed_mooncake_line_names_file_line_and_field(tmp_path, bad, problem, field):
    p = write(tmp_path, [mooncake_line(), mooncake_line(), bad], "mc.jsonl")
    with pytest.raises(TraceFormatError) as e:
        list(iter_mooncake_trace(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:3:")
    assert problem in msg
    if field:
        assert f"field {field!r}" in msg
    assert isinstance(e.value, ValueError)


def tokens_line(**kw) -> str:
    obj = {"arrival": 0.5, "tokens": [1, 2, 3], "output_len": 4}
    obj.update(kw)
    return json.dumps(obj)


BAD_TOKENS = [
    (tokens_line(tokens=[]), "empty", "tokens"),
    (tokens_line(tokens=[1, 2.5]), "list of integers", "tokens"),
    (tokens_line(tokens=[1, -2]), "negative", "tokens"),
    (tokens_line(arrival=-0.1), ">= 0", "arrival"),
    (tokens_line(arrival="soon"), "number", "arrival"),
    (tokens_line(output_len=None), "integer", "output_len"),
    (tokens_line(session_id=3), "string", "session_id"),
    (tokens_line(close_session="yes"), "true or false", "close_session"),
    (tokens_line(colour="red"), "unknown key", "colour"),
    ('{"arrival": 0, "tokens": [1]}', "missing key", "output_len"),
]


@pytest.mark.parametrize("bad,problem,field", BAD_TOKENS)
def test_malformed_tokens_line_names_file_line_and_field(tmp_path, bad, problem, field):
    p = write(tmp_path, [tokens_line(), bad], "tok.jsonl")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, "tokens")
    msg = str(e.value)
    assert msg.startswith(f"{p}:2: field {field!r}") and problem in msg


def test_format_detection_and_bad_format_name(tmp_path):
    assert detect_format(write(tmp_path, [mooncake_line()])) == "mooncake"
    with pytest.raises(TraceFormatError, match="cannot tell"):
        load_trace(write(tmp_path, ['{"foo": 1}'], "u.jsonl"))
    with pytest.raises(TraceFormatError, match="empty trace"):
        load_trace(write(tmp_path, [""], "e.jsonl"))
    with pytest.raises(ValueError, match="allowed"):
        load_trace(write(tmp_path, [mooncake_line()]), "csv")


def test_max_requests_stops_reading_early(tmp_path):
    p = write(tmp_path, [mooncake_line(), mooncake_line(), "{broken"])
    assert len(load_trace(p, max_requests=2)) == 2  # the broken third line is never read
