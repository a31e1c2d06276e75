"""Console progress: plain periodic lines with a known total and an ETA in a log file."""

from __future__ import annotations

import io

from sim.progress import Progress, expected_requests


def test_a_log_gets_plain_lines_with_total_and_eta_never_carriage_returns() -> None:
    log = io.StringIO()
    p = Progress("L1", total=10, stream=log, every_s=0.0, tty=False)
    for done in range(1, 11):
        p(done, done + 2, done * 0.5)
    p.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 10
    assert lines[3].startswith("[L1] 4/10 requests, 2.0 s simulated") and "ETA" in lines[3]
    assert "ETA" not in lines[-1]  # done


def test_without_a_known_total_the_line_says_it_grows() -> None:
    log = io.StringIO()
    Progress("x", stream=log, every_s=0.0, tty=False)(3, 7, 1.0)
    assert "3/7 requests (total grows)" in log.getvalue()


def test_a_terminal_gets_a_bar_with_the_fixed_total() -> None:
    term = io.StringIO()
    p = Progress("L1", total=144, stream=term, tty=True)
    p(50, 74, 3.3)
    p.close()
    assert "/144" in term.getvalue() and "L1" in term.getvalue()


def test_the_total_is_known_for_multiturn_workloads() -> None:
    assert expected_requests({"kind": "multiturn", "num_clients": 24, "num_rounds": 6}) == 144
    assert expected_requests({"kind": "trace", "path": "x"}) is None
