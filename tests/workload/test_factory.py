"""make_workload: kinds, defaults, and errors that name kind, key and what is allowed."""

from __future__ import annotations

import math

import pytest

from hicache.workload.factory import KINDS, make_config, make_workload
from hicache.workload.multiturn import MultiturnWorkload
from tests.shared_data import SYNTHETIC_TRACE

TRACE = str(SYNTHETIC_TRACE)


def test_every_kind_builds_with_defaults_except_trace_path(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"arrival": 0, "tokens": [1], "output_len": 1}\n')
    for kind in KINDS:
        spec = {"kind": kind, "path": "t.jsonl"} if kind == "trace" else {"kind": kind}
        wl = make_workload(spec, seed=0, base_dir=tmp_path)
        assert wl.start()
        with pytest.raises(RuntimeError, match="twice"):  # every kind starts only once
            wl.start()


def test_multiturn_defaults_and_overrides():
    wl = make_workload({"kind": "multiturn", "num_clients": 4, "request_rate": math.inf,
                        "request_length": [8, 16]}, seed=1)
    assert isinstance(wl, MultiturnWorkload)
    c = wl.config
    assert (c.num_clients, c.request_length, c.output_length, c.num_rounds) == (
        4, (8, 16), (64, 64), 5)
    assert (c.max_parallel, c.request_rate) == (128, math.inf)


def test_unknown_kind_lists_kinds():
    with pytest.raises(ValueError, match=r"'kind'.*'chat'.*multiturn.*shared_prefix"):
        make_workload({"kind": "chat"}, 0)
    with pytest.raises(ValueError, match="kind"):
        make_workload({}, 0)


def test_unknown_key_names_kind_key_and_allowed_keys():
    with pytest.raises(ValueError) as e:
        make_config({"kind": "multiturn", "num_client": 3})
    msg = str(e.value)
    assert "'multiturn'" in msg and "'num_client'" in msg and "num_clients" in msg


@pytest.mark.parametrize("key,value,allowed", [
    ("num_clients", 0, ">= 1"), ("max_parallel", 2.5, "integer"),
    ("request_rate", -1, "rate > 0"), ("request_length", [9, 3], "lo <= hi"),
    ("round_barrier", "yes", "true or false"), ("think_time", -1.0, ">= 0"),
])
def test_invalid_value_names_kind_key_and_allowed(key, value, allowed):
    with pytest.raises(ValueError) as e:
        make_config({"kind": "multiturn", key: value})
    msg = str(e.value)
    assert "'multiturn'" in msg and repr(key) in msg and allowed in msg


def test_trace_errors_and_real_trace():
    with pytest.raises(ValueError, match=r"'trace'.*'format'.*mooncake"):
        make_config({"kind": "trace", "path": TRACE, "format": "csv"})
    with pytest.raises(ValueError, match=r"'trace'.*'path'"):
        make_config({"kind": "trace"})
    wl = make_workload({"kind": "trace", "path": TRACE, "max_requests": 50,
                        "time_scale": 2.0}, seed=0)
    reqs = wl.start()
    assert len(reqs) == 50 and reqs[0].prompt_len > 0


def test_seed_must_be_int():
    with pytest.raises(ValueError, match="seed"):
        make_workload({"kind": "multiturn"}, seed="1")  # type: ignore[arg-type]
