"""Stream ordering (the L3 store and its clients: tests/sim/test_sim_l3.py)."""

from __future__ import annotations

from sim.streams import Stream


def _logging_op(env, log):  # noqa: ANN001, ANN202
    """op(name, dt): a body that takes ``dt`` and logs (name, its end)."""
    def op(name, dt):  # noqa: ANN001, ANN202
        def body():  # noqa: ANN202
            yield env.timeout(dt)
            log.append((name, env.now))
        return body
    return op


def test_stream_ops_run_in_order_and_can_wait_on_other_streams(env) -> None:
    compute, d2h = Stream(env, "compute"), Stream(env, "d2h")
    log = []
    op = _logging_op(env, log)
    c1 = compute.submit(op("c1", 3))
    compute.submit(op("c2", 1))
    d2h.submit(op("backup", 1), waits=(c1,))  # like cudaStreamWaitEvent on c1's event
    env.run()
    assert log == [("c1", 3), ("c2", 4), ("backup", 4)]
    assert compute.idle() and d2h.idle()


def test_an_op_waits_for_every_event_it_names(env) -> None:
    """One wait or several (all of them), fired before the op's turn or after."""
    a, b, c = Stream(env, "a"), Stream(env, "b"), Stream(env, "c")
    log = []
    op = _logging_op(env, log)
    a1 = a.submit(op("a1", 2))
    b1 = b.submit(op("b1", 5))
    c.submit(op("c1", 6))
    c.submit(op("both", 1), waits=(a1, b1))  # c1 ends last: both fired before its turn
    c.submit(op("one", 1), waits=(b.submit(op("b2", 4)),))  # b2 ends at 9, after "both"
    env.run()
    assert sorted(log, key=lambda x: (x[1], x[0])) == [
        ("a1", 2), ("b1", 5), ("c1", 6), ("both", 7), ("b2", 9), ("one", 10)]
