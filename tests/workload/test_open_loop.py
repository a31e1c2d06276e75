"""Open-loop workloads: long context, shared prefix, trace replay."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from wl_driver import drive

from hicache.workload.long_context import LongContextConfig, LongContextWorkload
from hicache.workload.shared_prefix import SharedPrefixConfig, SharedPrefixWorkload
from hicache.workload.trace_replay import TraceConfig, TraceReplayWorkload


def sig(reqs):
    return [(r.rid, r.arrival, r.output_len, list(r.tokens)) for r in reqs]


def test_long_context_lengths_and_no_sharing_by_default():
    cfg = LongContextConfig(count=6, prompt_length=[3000, 5000], output_length=9)
    reqs = LongContextWorkload(cfg, seed=1).start()
    assert len(reqs) == 6 and all(3000 <= r.prompt_len <= 5000 for r in reqs)
    assert len({t for r in reqs for t in r.tokens}) == sum(r.prompt_len for r in reqs)
    assert sig(reqs) == sig(LongContextWorkload(cfg, seed=1).start())
    assert sig(reqs) != sig(LongContextWorkload(cfg, seed=2).start())
    assert drive(LongContextWorkload(cfg, seed=1))  # no follow-ups, finishes


def test_long_context_shared_documents():
    cfg = LongContextConfig(count=20, prompt_length=1500, num_documents=3,
                            document_length=1000)
    reqs = LongContextWorkload(cfg, seed=3).start()
    docs = {tuple(r.tokens[:1000]) for r in reqs}
    assert len(docs) == 3  # 20 draws over 3 documents hit all three with this seed
    suffixes = [set(r.tokens[1000:]) for r in reqs]
    assert all(len(s) == 500 for s in suffixes)
    assert not set.intersection(*suffixes[:2]) and not (suffixes[0] & set().union(*docs))


def test_long_context_prompt_must_exceed_document():
    with pytest.raises(ValueError, match="prompt_length"):
        LongContextConfig(prompt_length=100, num_documents=1, document_length=100)


def test_shared_prefix_groups():
    cfg = SharedPrefixConfig(num_groups=4, prefix_length=64, suffix_length=16,
                             requests_per_group=5, output_length=3, request_rate=10.0)
    reqs = SharedPrefixWorkload(cfg, seed=2).start()
    assert len(reqs) == 20 and [r.rid for r in reqs] == list(range(20))
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:], strict=False))
    groups = defaultdict(list)
    for r in reqs:
        groups[r.client].append(r)
    assert sorted(len(g) for g in groups.values()) == [5] * 4
    prefixes = {g: {tuple(r.tokens[:64]) for r in rs} for g, rs in groups.items()}
    assert all(len(p) == 1 for p in prefixes.values())  # one prefix per group
    assert len({next(iter(p)) for p in prefixes.values()}) == 4  # distinct across groups
    assert [r.client for r in reqs] != sorted(r.client for r in reqs)  # shuffled
    assert sig(reqs) == sig(SharedPrefixWorkload(cfg, seed=2).start())


def test_trace_replay_time_scale_and_max_requests(tmp_path):
    lines = [{"arrival": t, "tokens": [i, i + 1], "output_len": 2}
             for i, t in enumerate([2.0, 1.0, 3.0])]
    (tmp_path / "tr.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    wl = TraceReplayWorkload(TraceConfig(path="tr.jsonl", time_scale=0.5), base_dir=tmp_path)
    reqs = wl.start()
    assert [(r.rid, r.arrival) for r in reqs] == [(1, 0.5), (0, 1.0), (2, 1.5)]
    assert wl.on_finished(0, 9.0) == []
    short = TraceReplayWorkload(TraceConfig(path=str(tmp_path / "tr.jsonl"), max_requests=2))
    assert [r.rid for r in short.start()] == [1, 0]
