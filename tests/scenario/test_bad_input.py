"""Issue 10's bad-input reproductions: each fails cleanly (exit 2, the key and value named)
before anything runs, or is handled (capacities accounted, not materialised)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache.cli import main
from hicache.runtime.handles import Kind
from hicache.scenario import Scenario, ScenarioError, load_scenario
from hicache.tree.allocator import PageAllocator
from hicache.workload.traces import TraceFormatError, load_trace
from sim.driver import simulate
from sim.hardware.profile import load_profile

REPRODUCTIONS = [  # (--set item, what the message must say)
    ("scheduler.max_running_requests=abc",
     "scheduler.max_running_requests: expected an integer, got 'abc'"),
    ("replicas=[1]", "replicas: expected an integer, got [1]"),
    ("router=5", "router: expected a policy name"),
    ("model=null", "model: expected a preset name, a path or a mapping"),
    ("replicas=2.7", "replicas: expected an integer, got 2.7"),
    ("seed=1.5", "seed: expected an integer, got 1.5"),
    ("scheduler.overlap=maybe", "scheduler.overlap: expected true or false, got 'maybe'"),
    ("run.layerwise=nope", "run.layerwise: expected true or false, got 'nope'"),
    ("run.backup_throttle_bytes_per_s=-5",
     "run.backup_throttle_bytes_per_s: expected a value > 0"),
    ("run.max_sim_time=.nan", "run.max_sim_time: expected a finite number, got nan"),
    ("cache=", "cache: is a section; set its keys"),
    ("cache.device_tokens=1e400", "cache.device_tokens: expected an integer, got inf"),
    ("workload.request_rate=-1", "workload.request_rate: expected a rate > 0"),
    ("scheduler.max_running_requests=0",
     "scheduler.max_running_requests: expected a value >= 1, got 0"),
]


@pytest.mark.parametrize("item, message", REPRODUCTIONS)
def test_a_bad_override_exits_2_naming_key_and_value(item, message, tmp_path, capsys):
    rc = main(["run", "quick", "--variant", "L1", "--no-progress", "--out",
               str(tmp_path / "o"), "--set", item])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and f"--set {item}" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_a_section_given_twice_fails_naming_both_lines(tmp_path):
    p = tmp_path / "twice.yaml"
    p.write_text("name: x\ncache: {page_size: 16}\nworkload: {kind: agent}\n"
                 "cache: {device_tokens: 4096}\n")
    with pytest.raises(ScenarioError, match=r"twice.yaml:4:1: duplicate key 'cache' "
                                            r"\(first given on line 2\)"):
        load_scenario(p)


def test_numbers_such_as_1e12_in_yaml_are_numbers(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("name: x\ncache: {device_tokens: 1e12, hicache_ratio: 2e0}\n"
                 "workload: {kind: agent}\n")
    s = load_scenario(p)
    assert s.cache.device_tokens == 10**12 and type(s.cache.device_tokens) is int
    p.write_text("name: x\ncache: {page_size: 1.5e1}\nworkload: {kind: agent}\n")
    assert load_scenario(p).cache.page_size == 15


def test_a_huge_l1_runs_in_memory_proportional_to_use():
    s = load_scenario("quick").variant("L1+L2").with_overrides(
        ["cache.device_tokens=1e14", "workload.num_clients=2", "workload.num_rounds=2"])
    res = simulate(s)
    assert res.requests == 4 and all(r["finish"] is not None for r in res.records)
    pool = res.replicas[0].runtime.device.pools[Kind.FULL]
    assert pool.size == 10**14 // 64 and pool.used_count < 1000
    assert len(pool._ids._used) < 10_000  # accounted, not materialised


def test_allocators_account_capacity_instead_of_materialising_it():
    a = PageAllocator(10**15)
    e = a.alloc(5)
    assert list(e.pages()) == [0, 1, 2, 3, 4] and a.free_pages == 10**15 - 5
    a.free(e)
    assert list(a.alloc(7).pages()) == [5, 6, 7, 8, 9, 10, 11]  # fresh first, then freed
    assert len(a._ids._used) < 100 and a.used_pages == 7


def test_a_full_allocator_reuses_freed_runs_in_free_order():
    a = PageAllocator(6)
    first, second = a.alloc(3), a.alloc(3)
    a.free(second)
    a.free(first)
    assert list(a.alloc(4).pages()) == [3, 4, 5, 0] and a.free_pages == 2
    with pytest.raises(ValueError, match="page 1 of L1/full freed twice"):
        a.free(first)  # page 0 is in use again, pages 1 and 2 are free
    assert a.free_pages == 2  # nothing changed


def test_replay_capacity_inf_is_refused_and_1e12_runs(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival": i, "tokens": [1, 2, 3, 4 + i],
                                         "output_len": 1}) + "\n" for i in range(5)))
    args = ["replay", "--trace", str(trace), "--page-size", "1", "--json"]
    with pytest.raises(SystemExit) as e:
        main([*args, "--capacity-tokens", "inf"])
    assert e.value.code == 2 and "'inf' is not a size" in capsys.readouterr().err
    assert main([*args, "--capacity-tokens", "1e12"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["capacity_tokens"] == 10**12 and out["cached_tokens"] == 12


@pytest.mark.parametrize("flag, value", [("--l2-tokens", "-100"), ("--max-requests", "-1"),
                                         ("--page-size", "0"), ("--capacity-tokens", "1.5")])
def test_replay_numbers_are_checked_before_anything_runs(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["replay", "--trace", str(tmp_path / "none.jsonl"), flag, value])
    assert e.value.code == 2 and f"argument {flag}:" in capsys.readouterr().err


def test_calibrate_page_size_0_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--page-size", "0"])
    assert e.value.code == 2 and "argument --page-size" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["tokens", "hash_ids"])
def test_token_and_hash_ids_beyond_64_bits_name_file_line_and_field(key, tmp_path):
    line = ({"arrival": 0, "tokens": [1, 2**63], "output_len": 1} if key == "tokens" else
            {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [2**63]})
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(line) + "\n")
    with pytest.raises(TraceFormatError, match=rf"t.jsonl:1: field '{key}': id .* 2\*\*63"):
        load_trace(p)


def test_a_hardware_profile_with_a_nan_bandwidth_is_refused():
    h = load_profile("h100-sxm")
    text = Path(h.source).read_text().replace("h2d_bytes_per_s:", "h2d_bytes_per_s: .nan #", 1)
    with pytest.raises(ValueError, match="pcie.h2d_bytes_per_s.*finite number, got nan"):
        load_profile(_write(text))


def _write(text: str) -> Path:
    import tempfile
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    f.write(text)
    f.close()
    return Path(f.name)


def test_a_missing_trace_fails_at_load_naming_key_and_resolved_path(tmp_path):
    p = tmp_path / "sub" / "s.yaml"
    p.parent.mkdir()
    p.write_text("name: x\nworkload: {kind: trace, path: ../traces/t.jsonl}\n")
    with pytest.raises(ScenarioError, match=rf"s.yaml:2: workload.path: trace file not found: "
                                            rf"{tmp_path}/traces/t.jsonl"):
        load_scenario(p)
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces/t.jsonl").write_text('{"arrival": 0, "tokens": [1], "output_len": 1}\n')
    assert load_scenario(p).workload.path == str(tmp_path / "traces/t.jsonl")


def test_a_known_public_trace_that_is_missing_says_where_to_get_it(tmp_path):
    with pytest.raises(ScenarioError, match="download it from https://github.com/kvcache-ai"):
        Scenario.from_mapping({"name": "x", "workload": {
            "kind": "trace", "path": "nowhere/mooncake_conversation_trace.jsonl"}},
            base=tmp_path)


def test_the_simulators_pools_account_capacity_and_reuse_the_lowest_free_first():
    from hicache.runtime.handles import Tier
    from sim.pools import CapacityError, PagePool

    p = PagePool(Tier.DEVICE, Kind.FULL, 10**15)
    a, b = p.allocate(3), p.allocate(2)
    assert (a, b) == ([0, 1, 2], [3, 4])
    p.free(a)
    p.free(b)
    # lowest free id first, as the torch runtime's allocator (same copy runs)
    assert p.allocate(4) == [0, 1, 2, 3] and p.free_count == 10**15 - 4
    assert len(p._ids._used) < 100
    with pytest.raises(ValueError, match="page 4 is not allocated"):
        p.free([3, 4])
    with pytest.raises(ValueError, match="page 3 is not allocated"):
        p.free([3, 3])
    assert p.free_count == 10**15 - 4 and p.is_allocated(3)  # nothing changed
    small = PagePool(Tier.HOST, Kind.FULL, 2)
    with pytest.raises(CapacityError):
        small.allocate(3)


def test_a_yaml_alias_bomb_fails_fast_with_bounded_messages(tmp_path):
    rows = ["name: bomb", "a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdef", "bcdefg", strict=True):
        rows.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    rows += ["workload: {kind: agent}", "model: {name: m, num_layers: 2, num_heads: 2, "
             "num_kv_heads: 2, head_dim: 2, hidden_size: 2, ffn_size: 2, layers: *g}"]
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(rows) + "\n")  # 9**7 leaves if expanded
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert len(str(e.value)) < 5000 and "model.layers[0]: got" in str(e.value)


@pytest.mark.parametrize("section, typo, right", [("l3", "mooncak", "mooncake"),
                                                  ("pcie", "copy_engine", "copy_engines"),
                                                  (None, "calibratd", "calibrated")])
def test_a_typo_in_a_hardware_profile_is_named_not_ignored(section, typo, right):
    from hicache.schema.yamlio import read_yaml
    d = read_yaml(load_profile("h100-sxm").source).data
    node = d if section is None else d[section]
    node[typo] = node.get(right, {})  # the right key stays: only the typo is extra
    key = typo if section is None else f"{section}.{typo}"
    with pytest.raises(ValueError, match=rf"key '{key}': unknown key \(did you mean "
                                         rf"'{right}'\?\)"):
        load_profile(d)
