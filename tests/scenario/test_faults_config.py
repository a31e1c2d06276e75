"""The ``faults:`` section: validated once in the typed Scenario (file, line, key), rebuilt
without pydantic, set per variant; the torch runtime refuses it."""

from __future__ import annotations

import pytest

from hicache.scenario import ScenarioError, load_resolved, load_scenario
from hicache.scenario.faults import L3NodeDown, LinkSlow

BAD = [  # (faults value, what the message must say)
    ("[{kind: l3_node_down, start: 5, end: 2}]", "faults[0].end: 2 must be after start 5"),
    ("[{kind: nope, start: 0, end: 1}]", "faults[0]: unknown 'kind' 'nope'"),
    ("[{kind: link_down, link: pcie, start: 0, end: 1}]",
     "faults[0].link: a lost PCIe link is a lost GPU"),
    ("[{kind: link_slow, factor: 0, start: 0, end: 1}]",
     "faults[0].factor: expected a value > 0.0, got 0"),
    ("[{kind: host_pressure, bandwidth_factor: 1.5, start: 0, end: 1}]",
     "faults[0].bandwidth_factor: expected a value <= 1.0"),
    ("[{kind: l3_timeout, start: 0}]", "faults[0].end: required"),
    ("[{kind: l3_timeout, start: 0, end: .nan}]", "faults[0].end: expected a finite number"),
    ("[{kind: l3_timeout, start: -1, end: 1}]", "faults[0].start: expected a value >= 0"),
    ("[{kind: l3_timeout, start: 0, end: 2, node: 1}]", "faults[0].node: unknown key"),
    ("[{kind: l3_node_down, start: 0, end: 2, node: -1}]", "faults[0].node: expected a value"),
    ("{kind: l3_timeout}", "faults: expected a list"),
]


@pytest.mark.parametrize("value, message", BAD)
def test_a_bad_fault_is_refused_naming_its_key(value, message) -> None:
    with pytest.raises(ScenarioError, match=None) as err:
        load_scenario("quick").with_overrides([f"faults={value}"])
    assert message in str(err.value)


def test_a_bad_fault_in_a_file_names_the_line(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {kind: multiturn, num_clients: 2}\nfaults:\n"
                    "  - kind: link_slow\n    link: pcie\n    factor: 2\n"
                    "    start: 0\n    end: 1\n")
    with pytest.raises(ScenarioError, match=r"s.yaml:6: faults\[0\].factor"):
        load_scenario(path)


def test_faults_round_trip_through_a_resolved_document_and_variants_can_drop_them() -> None:
    sc = load_scenario("quick").with_overrides([
        "faults=[{kind: l3_node_down, start: 1, end: 3, node: 1}, "
        "{kind: link_slow, link: nic, factor: 0.5, start: 0, end: 2, replica: 0}]",
        "variants=[{name: faulty, set: {}}, {name: healthy, set: {faults: []}}]"])
    assert sc.faults == (L3NodeDown(start=1.0, end=3.0, node=1),
                         LinkSlow(start=0.0, end=2.0, link="nic", factor=0.5, replica=0))
    assert load_resolved(sc.to_mapping()).faults == sc.faults  # no pydantic needed
    assert sc.variant("faulty").faults == sc.faults and sc.variant("healthy").faults == ()
    assert "faults" not in load_scenario("quick").to_mapping()  # absent when empty


def test_the_torch_runtime_refuses_simulated_faults() -> None:
    pytest.importorskip("torch")
    from gpu_backend.driver import run_scenario

    sc = load_scenario("quick").with_overrides(
        ["variants=[]", "faults=[{kind: l3_timeout, start: 0, end: 1}]"])
    with pytest.raises(ValueError, match="faults: injected by the simulator only"):
        run_scenario(sc, device="cpu")
