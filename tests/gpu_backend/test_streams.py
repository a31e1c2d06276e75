"""Lanes order work: FIFO per lane, cross-lane waits, errors surface at poll."""

from __future__ import annotations

import threading
import time

import pytest

from gpu_backend.streams import Lanes
from tests.gpu_backend.builders import make_runtime


def test_an_op_waiting_on_another_lane_starts_after_it_ends():
    lanes = Lanes("cpu")
    try:
        a = lanes["h2d"].submit(lambda: time.sleep(0.03))
        b = lanes["compute"].submit(lambda: None, [a])
        c = lanes["compute"].submit(lambda: None)
        assert c.wait(2) and b.is_done()
        assert b.start >= a.end and c.start >= b.end
    finally:
        lanes.close()


def test_lanes_overlap_when_nothing_orders_them():
    lanes = Lanes("cpu")
    try:
        gate = threading.Barrier(2, timeout=2)  # both ops must run at the same time
        a = lanes["h2d"].submit(gate.wait)
        b = lanes["d2h"].submit(gate.wait)
        assert a.wait(3) and b.wait(3)
        assert a.error is None and b.error is None
        assert a.start < b.end and b.start < a.end
    finally:
        lanes.close()


def test_a_failing_op_is_raised_by_poll():
    with make_runtime() as rt:
        rt.lanes["compute"].submit(lambda: 1 / 0, on_done=[rt.outbox.check]).wait(2)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            rt.poll()
