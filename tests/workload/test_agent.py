"""Agent sessions: growing context, close on the last step, sessions-in-flight limit."""

from __future__ import annotations

from collections import defaultdict

from wl_driver import drive, turns_by

from hicache.workload.agent import AgentConfig, AgentWorkload


def run(seed=5, **kw):
    base = dict(num_sessions=10, max_sessions=3, session_rate="inf", steps=[2, 6],
                system_prompt_length=32, task_length=20, tool_output_length=[5, 15],
                output_length=[1, 4], tool_time=[0.1, 0.3])
    base.update(kw)
    return drive(AgentWorkload(AgentConfig(**base), seed))


def sessions(records):
    return turns_by(records, lambda r: r.session_id)


def test_each_session_grows_and_closes_once_at_the_end():
    ss = sessions(run())
    assert len(ss) == 10
    for sid, steps in ss.items():
        assert 2 <= len(steps) <= 6
        assert [r.round for r, _ in steps] == list(range(len(steps)))
        assert [r.close_session for r, _ in steps] == [False] * (len(steps) - 1) + [True]
        assert all(sid == f"agent-{r.client}" for r, _ in steps)
        for (prev, f), (nxt, _) in zip(steps, steps[1:], strict=False):
            assert list(nxt.tokens[: prev.prompt_len]) == list(prev.tokens)
            assert 5 <= nxt.prompt_len - prev.prompt_len - prev.output_len <= 15
            assert f + 0.1 <= nxt.arrival <= f + 0.3


def test_sessions_in_flight_limit_binds():
    spans = [(s[0][0].arrival, s[-1][1]) for s in sessions(run()).values()]
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    assert peak == 3


def test_deterministic_per_seed():
    key = lambda recs: sorted((r.rid, r.arrival, tuple(r.tokens)) for r, _ in recs)  # noqa: E731
    assert key(run(seed=1)) == key(run(seed=1))
    assert key(run(seed=1)) != key(run(seed=2))


def test_system_prompt_shared_rest_disjoint():
    recs = run()
    firsts = [r for r, _ in recs if r.round == 0]
    assert len({tuple(r.tokens[:32]) for r in firsts}) == 1
    owners = defaultdict(set)
    for r, _ in recs:
        for t in r.tokens[32:]:
            owners[t].add(r.session_id)
    assert all(len(o) == 1 for o in owners.values())


def test_sessions_of_one_repository_share_its_context_and_no_other_tokens():
    recs = run(repositories=3, repository_length=40)
    firsts = {r.client: r for r, _ in recs if r.round == 0}
    ctx = {c: tuple(r.tokens[32:72]) for c, r in firsts.items()}
    assert len(set(ctx.values())) == 3
    for a, r in firsts.items():
        assert tuple(r.tokens[:32]) == tuple(firsts[0].tokens[:32])  # the system prompt
        assert r.prompt_len == 32 + 40 + 20  # system + repository + task
        for b in firsts:
            assert (ctx[a] == ctx[b]) == (a % 3 == b % 3)  # session i: repository i % 3
    owners = defaultdict(set)
    for r, _ in recs:
        for t in r.tokens[72:]:
            owners[t].add(r.client)
    assert all(len(v) == 1 for v in owners.values())  # past the shared part, disjoint


def test_repositories_without_their_length_are_refused():
    import pytest

    with pytest.raises(ValueError, match="repository_length"):
        AgentConfig(repositories=3)


def test_reasoning_is_generated_and_forks_off_the_next_prompt():
    """A thinking model's reasoning is part of the step's output (decode work and KV) but
    the next prompt carries only the tool call: it forks right after the step's prompt."""
    ss = sessions(run(reasoning_length=[8, 12], output_length=3))
    for steps in ss.values():
        for (prev, _), (nxt, _) in zip(steps, steps[1:], strict=False):
            reasoning = prev.output_len - 3
            assert 8 <= reasoning <= 12
            kv = prev.full_tokens
            assert len(kv) == prev.prompt_len + prev.output_len
            assert list(kv[: prev.prompt_len]) == list(prev.tokens)
            assert list(nxt.tokens[: prev.prompt_len]) == list(prev.tokens)  # still a prefix
            # the call comes back, the reasoning does not: the growth is the call + result
            assert 5 <= nxt.prompt_len - prev.prompt_len - 3 <= 15
            # so the next prompt leaves the step's KV at the step's prompt end
            assert nxt.tokens[prev.prompt_len] != kv[prev.prompt_len]


def test_without_reasoning_every_draw_is_the_same_as_before():
    """reasoning_length 0 (the default) draws nothing: runs are unchanged."""
    key = lambda recs: [(r.rid, r.arrival, tuple(r.tokens), r.output_len,  # noqa: E731
                         tuple(r.full_tokens)) for r, _ in recs]
    assert key(run(reasoning_length=0)) == key(run())
    assert all(list(r.full_tokens[r.prompt_len:]) == list(n.tokens[r.prompt_len:][:r.output_len])
               for steps in sessions(run()).values()
               for (r, _), (n, _) in zip(steps, steps[1:], strict=False))
