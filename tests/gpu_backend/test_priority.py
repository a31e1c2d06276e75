"""A measurement's scheduling priority: raised for the block, restored after, and a
clear error for an unknown mode; without the permission it falls back, never fails."""

from __future__ import annotations

import os

import pytest

from gpu_backend.priority import high_priority


def test_the_priority_is_restored_after_the_block():
    before = os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)
    for mode in ("fifo", "nice", "none"):
        with high_priority(mode) as applied:
            assert applied in ("SCHED_FIFO 10", "nice -15", "none")
            if applied.startswith("SCHED_FIFO"):
                assert os.sched_getscheduler(0) == os.SCHED_FIFO
            if mode == "none":
                assert applied == "none"
        assert (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)) == before


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="priority must be one of fifo, nice, none"):
        with high_priority("rt"):
            pass
