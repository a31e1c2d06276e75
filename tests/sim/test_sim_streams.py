"""Stream ordering (the L3 store and its clients: tests/sim/test_sim_l3.py)."""

from __future__ import annotations

from sim.streams import Stream


def test_stream_ops_run_in_order_and_can_wait_on_other_streams(env) -> None:
    compute, d2h = Stream(env, "compute"), Stream(env, "d2h")
    log = []

    def op(name, dt):
        def body():
            yield env.timeout(dt)
            log.append((name, env.now))
        return body
    c1 = compute.submit(op("c1", 3))
    compute.submit(op("c2", 1))
    d2h.submit(op("backup", 1), waits=(c1,))  # like cudaStreamWaitEvent on c1's event
    env.run()
    assert log == [("c1", 3), ("c2", 4), ("backup", 4)]
    assert compute.idle() and d2h.idle()
