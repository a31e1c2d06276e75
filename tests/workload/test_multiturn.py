"""Multi-turn chat workload (bench_multiturn shape)."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest
from wl_driver import drive, max_in_flight, turns_by

from hicache.workload.multiturn import MultiturnConfig, MultiturnWorkload
from hicache.workload.params import poisson_arrivals
from hicache.workload.tokens import namespace_of


def small(**kw) -> MultiturnWorkload:
    seed = kw.pop("seed", 7)
    base = dict(num_clients=12, num_rounds=4, request_length=40, output_length=8,
                request_rate=20.0, max_parallel=5)
    base.update(kw)
    return MultiturnWorkload(MultiturnConfig(**base), seed=seed)


def signature(records):
    return [(r.rid, r.client, r.round, round(r.arrival, 9), r.output_len, list(r.tokens))
            for r, _ in sorted(records, key=lambda x: x[0].rid)]


def by_client(records):
    return turns_by(records, lambda r: r.client)


def test_defaults_match_bench_multiturn():
    c = MultiturnConfig()
    assert (c.num_clients, c.max_parallel, c.num_rounds) == (256, 128, 5)
    assert (c.request_length, c.output_length, c.request_rate) == ((512, 512), (64, 64), 1.0)


def test_every_client_runs_every_round_once():
    records = drive(small())
    assert sorted((r.client, r.round) for r, _ in records) == [
        (c, k) for c in range(12) for k in range(4)]
    assert sorted(r.rid for r, _ in records) == list(range(48))


def test_same_seed_same_requests_different_seed_differs():
    a, b = drive(small()), drive(small())
    assert signature(a) == signature(b)
    other = MultiturnWorkload(small().config, seed=8)
    assert signature(drive(other)) != signature(a)


def test_tokens_do_not_depend_on_completion_order():
    # Different service times change who finishes first; each client's prompts stay equal.
    fast = drive(small(), service=lambda r: 0.01)
    slow = drive(small(), service=lambda r: 1.0 + (r.client % 3))
    key = lambda recs: {(r.client, r.round): list(r.tokens) for r, _ in recs}  # noqa: E731
    assert key(fast) == key(slow)


def test_next_turn_prompt_is_previous_prompt_plus_output_plus_question():
    wl = small(request_length=[10, 30], output_length=[1, 9])
    for turns in by_client(drive(wl)).values():
        for (prev, _), (nxt, _) in zip(turns, turns[1:], strict=False):
            grown = len(nxt.tokens) - len(prev.tokens) - prev.output_len
            assert 10 <= grown <= 30  # the new question
            assert list(nxt.tokens[: len(prev.tokens)]) == list(prev.tokens)


def test_clients_share_only_the_system_prompt():
    records = drive(small(system_prompt_length=16))
    first = {r.client: r for r, _ in records if r.round == 0}
    system = list(first[0].tokens[:16])
    assert all(list(r.tokens[:16]) == system for r in first.values())
    owners = defaultdict(set)
    for r, _ in records:
        for t in r.tokens[16:]:
            owners[t].add(r.client)
    assert all(len(o) == 1 for o in owners.values())
    assert {namespace_of(t) for t in system} == {0}


def test_in_flight_limit_is_honoured_and_binds():
    records = drive(small(max_parallel=5, request_rate=math.inf))
    assert max_in_flight(records) == 5  # == not <=: the limit must actually bind


def test_waiting_turn_arrives_when_a_slot_frees():
    records = drive(small(max_parallel=1, request_rate=math.inf))
    order = sorted(records, key=lambda x: x[0].arrival)
    for (_, f), (nxt, _) in zip(order, order[1:], strict=False):
        assert nxt.arrival == pytest.approx(f)  # one slot: back to back, no gaps


def test_round_barrier():
    records = drive(small(round_barrier=True, max_parallel=12))
    end_of_round = defaultdict(float)
    for r, f in records:
        end_of_round[r.round] = max(end_of_round[r.round], f)
    for r, _ in records:
        if r.round > 0:
            assert r.arrival >= end_of_round[r.round - 1]


def test_without_barrier_fast_clients_run_ahead():
    records = drive(small(max_parallel=12, request_rate=math.inf),
                    service=lambda r: 0.1 if r.client == 0 else 1.0)
    client0_round3 = next(r for r, _ in records if r.client == 0 and r.round == 3)
    others_round0_end = max(f for r, f in records if r.round == 0)
    assert client0_round3.arrival < others_round0_end


def test_think_time_delays_next_turn():
    records = drive(small(think_time=2.5, max_parallel=100))
    for turns in by_client(records).values():
        for (_, f), (nxt, _) in zip(turns, turns[1:], strict=False):
            assert nxt.arrival == pytest.approx(f + 2.5)


def test_sessions_close_after_last_round():
    records = drive(small(sessions=True))
    for r, _ in records:
        assert r.session_id == f"client-{r.client}"
        assert r.close_session == (r.round == 3)


def test_poisson_arrivals_have_the_requested_mean_rate():
    # n arrivals span n-1 i.i.d. Exp(rate) gaps: their sum S has mean (n-1)/rate and
    # standard deviation sqrt(n-1)/rate, so the estimate (n-1)/S has relative standard
    # deviation ~ 1/sqrt(n-1) = 0.5% for n = 40,001. We allow 4 sigma (2%): a correct
    # generator fails with probability ~6e-5 (and the seed is fixed), a wrong mean fails.
    n, rate = 40_001, 3.0
    t = poisson_arrivals(random.Random(123), n, rate)
    assert t[0] == 0.0 and all(a <= b for a, b in zip(t, t[1:], strict=False))
    assert (n - 1) / t[-1] == pytest.approx(rate, rel=4 / math.sqrt(n - 1))
    # Exponential gaps have coefficient of variation 1 (a fixed interval would give 0);
    # the sample CV's standard error is ~ 1/sqrt(n), so 4 sigma is again 2%.
    gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    assert sd / mean == pytest.approx(1.0, rel=4 / math.sqrt(n - 1))


def test_first_turns_follow_request_rate():
    wl = small(num_clients=400, num_rounds=1, request_rate=50.0, max_parallel=1000)
    first = sorted(r.arrival for r in wl.start())
    # 399 gaps of mean 1/50: relative sd 1/sqrt(399) = 5%; 4 sigma = 20%
    assert 399 / first[-1] == pytest.approx(50.0, rel=0.2)


def test_infinite_rate_puts_first_turns_at_zero():
    assert {r.arrival for r in small(request_rate="inf", max_parallel=100).start()} == {0.0}


def test_unknown_rid_and_double_finish_raise():
    wl = small()
    r = wl.start()[0]
    wl.on_finished(r.rid, 1.0)
    with pytest.raises(KeyError):
        wl.on_finished(r.rid, 2.0)
    with pytest.raises(KeyError):
        wl.on_finished(10_000, 2.0)


def test_memory_is_one_buffer_per_conversation():
    records = drive(small(num_clients=2, num_rounds=6, max_parallel=2))
    for turns in by_client(records).values():
        bufs = {id(r.tokens._buf) for r, _ in turns}  # TokenViews over one array
        assert len(bufs) == 1
