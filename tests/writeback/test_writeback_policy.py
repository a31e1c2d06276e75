"""Write-back policies (hicache.runtime.writeback): pure decisions from observations."""

from __future__ import annotations

import pytest

from hicache.runtime.writeback import (
    AdaptiveThrottle,
    ChunkLog,
    StaticThrottle,
    WritebackConfig,
    WritebackPolicy,
    make_policy,
)


def test_policies_by_name_and_a_bad_name_is_refused():
    assert type(make_policy("none")) is WritebackPolicy and not make_policy(None).chunked
    assert isinstance(make_policy("static"), StaticThrottle)
    assert isinstance(make_policy(WritebackConfig(policy="adaptive")), AdaptiveThrottle)
    with pytest.raises(ValueError, match="policy: got .fast."):
        make_policy("fast")


def test_static_paces_chunks_to_its_average_rate():
    p = make_policy(WritebackConfig(policy="static", rate_bytes_per_s=1e9))
    assert p.gate(0.0, 0.0, False).wait_s == 0.0  # the first chunk goes at once
    p.chunk_done(0.002, 8_000_000, 0.002)  # 8 MB in 2 ms: 6 ms of gap keep 1 GB/s
    assert p.gate(0.002, 0.0, True).wait_s == pytest.approx(0.006)
    assert not p.gate(0.008, 0.0, True).after_loads  # static ignores loads


def feed(p: AdaptiveThrottle, k: float, steps: int = 200, overlap: float = 0.5,
         base: float = 0.010, batch: int = 32) -> None:
    """Decode steps alternating alone / beside chunks; beside ones slowed k x overlap."""
    for i in range(steps):
        beside = i % 3 != 0
        s = base * (1 + k * overlap) if beside else base
        p.observe_step(i * base, batch, s, overlap if beside else 0.0)


@pytest.mark.parametrize("k", [0.06, 0.2])
def test_adaptive_learns_the_interference_and_sets_the_duty_from_it(k):
    p = AdaptiveThrottle(WritebackConfig(policy="adaptive", target_slowdown=0.02))
    feed(p, k)
    assert p.interference == pytest.approx(k, rel=0.02)
    assert p.duty == pytest.approx(0.02 / k, rel=0.02)
    p.chunk_done(1.0, 8 << 20, 0.001)
    gap = p.gate(1.0, 1.0, loads_active=True)
    assert gap.wait_s == pytest.approx(0.001 * (1 - p.duty) / p.duty, rel=1e-6)
    assert gap.after_loads  # yields to H2D loads


def test_adaptive_runs_unthrottled_when_chunks_do_not_slow_decode():
    p = AdaptiveThrottle(WritebackConfig(policy="adaptive", target_slowdown=0.02))
    feed(p, 0.0)
    assert p.interference == 0.0 and p.duty == 1.0


def test_adaptive_compares_only_steps_of_the_same_batch_size():
    p = AdaptiveThrottle(WritebackConfig(policy="adaptive"))
    p.observe_step(0.0, 8, 0.010, 0.0)  # a small batch alone
    p.observe_step(0.1, 64, 0.030, 0.5)  # a big one beside a chunk: no baseline for 64
    assert p.interference == 0.0 and p.duty == 1.0


def test_adaptive_probes_for_a_baseline_and_respects_the_lag_bound():
    cfg = WritebackConfig(policy="adaptive", max_lag_s=0.5)
    p = AdaptiveThrottle(cfg)
    p.observe_step(0.0, 16, 0.020, 0.5)  # beside a chunk, never seen alone
    g = p.gate(0.1, 0.1, False)
    assert g.wait_s == pytest.approx(p.PROBE * 0.020)  # leave one step alone
    assert p.gate(0.2, 0.1, False).wait_s == 0.0  # one probe per FRESH steps
    feed(p, 0.5)  # very disruptive chunks: the duty falls to its floor
    assert p.duty == cfg.duty_min
    p.chunk_done(1.0, 8 << 20, 0.1)  # the gap would be 0.1 x 19 = 1.9 s ...
    assert p.gate(1.0, 0.9, True).wait_s == pytest.approx(0.4)  # ... capped at the bound
    late = p.gate(1.5, 0.9, True)  # the oldest backup waited 0.6 s > max_lag_s
    assert late.wait_s == 0.0 and not late.after_loads


def test_chunk_log_measures_overlap():
    log = ChunkLog()
    log.ended(1.0, 2.0)
    assert log.overlap(0.0, 4.0) == pytest.approx(0.25)
    log.started(3.0)
    assert log.overlap(2.0, 4.0) == pytest.approx(0.5)
    assert log.overlap(5.0, 5.0) == 0.0


@pytest.mark.parametrize("policy", ["none", "static", "adaptive"])
@pytest.mark.parametrize("chunk", [None, (0.0005, 0.0012)])
def test_a_folds_steps_reported_at_once_leave_what_one_by_one_reports_leave(policy, chunk):
    """sim.writeback.Writeback.steps_done (a fold's observed steps in one call) leaves the
    same steps, ends and policy state as step_done per step, with or without chunks."""
    from sim.writeback import Writeback
    spans = [(0.001 * k, 0.001 * k + 0.0009 + 1e-6 * k) for k in range(40)]
    one, many = Writeback(policy), Writeback(policy)
    for wb in (one, many):
        if chunk is not None:
            wb.chunks.ended(*chunk)
        if policy == "adaptive":  # a baseline to compare with, so observations count
            wb.policy.observe_step(0.0, 8, 0.0009, 0.0)
    for k, (start, end) in enumerate(spans):
        one.step_done(7 + k, start, end, 8)
    many.steps_done(7, [s for s, _ in spans], [e for _, e in spans], 8)
    assert many.steps == one.steps and many.ends == one.ends
    assert vars(many.policy) == vars(one.policy)
    assert len(one.steps) == 40


@pytest.mark.parametrize("policy", ["none", "static"])
def test_steps_and_ends_read_between_reports_are_the_per_step_ones(policy):
    """Steps one by one, folds (one record each under none, empty ones included) and reads
    of steps/ends in between (the expansion resumes where it stopped): steps, ends and
    last_step always equal what step_done per step builds, in report order, a re-reported
    batch id keeping its latest end."""
    from sim.writeback import Writeback
    one, many = Writeback(policy), Writeback(policy)
    assert many.last_step() is None and many.steps == [] and many.ends == {}
    script = [("step", 1, [(0.0, 1.0)], 0), ("fold", 2, [(1.0, 2.0), (2.5, 3.0)], 4),
              ("fold", 4, [], 4), ("step", 4, [(3.0, 3.5)], 0),
              ("fold", 5, [(3.5, 4.0), (4.0, 4.25), (4.5, 5.0)], 3),
              ("step", 3, [(5.0, 6.0)], 2)]  # batch 3 again: its end moves
    for kind, first, spans, decode in script:
        for k, (s, e) in enumerate(spans):
            one.step_done(first + k, s, e, decode)
        if kind == "step":
            (s, e), = spans
            many.step_done(first, s, e, decode)
        else:
            many.steps_done(first, [s for s, _ in spans], [e for _, e in spans], decode)
        assert many.last_step() == (one.steps[-1][:2] if one.steps else None)
        if first % 2:
            assert many.steps == one.steps and many.ends == one.ends
    assert many.steps == one.steps and many.ends == one.ends
    assert len(many.steps) == 8 and many.ends[3] == 6.0 and many.last_step() == (5.0, 6.0)
    with pytest.raises(ValueError):  # strict lengths, as zip(strict=True) per step
        many.steps_done(9, [0.0], [], 1)
