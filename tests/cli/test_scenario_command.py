"""``hicache-lab scenario check|resolve|schema``: a scenario examined without running it."""

from __future__ import annotations

import json

from hicache.cli import main
from hicache.scenario import load_scenario


def test_check_lists_every_variant_with_its_tiers(capsys) -> None:
    assert main(["scenario", "check", "quick"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:3]] == ["L1", "L1+L2", "L1+L2+L3"]
    assert "L2" not in out[0].split("L1 ", 1)[1] and "L2 59,968 tokens" in out[1]
    assert "L3 mooncake" in out[2] and out[3] == "quick: ok (3 variant(s))"


def test_check_names_the_bad_key_and_exits_2(capsys) -> None:
    assert main(["scenario", "check", "quick", "--set", "cache.hicache_ratio=x"]) == 2
    err = capsys.readouterr().err
    assert "cache.hicache_ratio" in err and "'x'" in err


def test_resolve_writes_a_scenario_that_loads_back_equal(tmp_path, capsys) -> None:
    out = tmp_path / "q.json"
    assert main(["scenario", "resolve", "quick", str(out), "--set", "seed=7"]) == 0
    assert load_scenario(out) == load_scenario("quick", ["seed=7"])


def test_schema_is_the_committed_one(tmp_path) -> None:
    out = tmp_path / "s.json"
    assert main(["scenario", "schema", "--out", str(out)]) == 0
    schema = json.loads(out.read_text())
    assert "cache" in schema["properties"] and "workload" in schema["properties"]
