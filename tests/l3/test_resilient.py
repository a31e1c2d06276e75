"""ResilientL3: deadlines, retries, the down/probe cycle and counters, against fake stores."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from gpu_backend.l3 import L3Error, L3PartialError
from gpu_backend.l3.resilient import ResilientL3, RetryPolicy
from gpu_backend.l3_protocol import MemoryL3

FAST = RetryPolicy(timeout_s=0.2, retries=1, backoff_s=0.0, cooldown_s=5.0, close_grace_s=0)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Scripted(MemoryL3):
    """A MemoryL3 whose calls follow a script: "ok", "fail", "hang" (until released)."""

    def __init__(self, *script: str) -> None:
        super().__init__()
        self.script = list(script)
        self.calls = 0
        self.release = threading.Event()

    def _step(self) -> None:
        self.calls += 1
        what = self.script.pop(0) if self.script else "ok"
        if what == "fail":
            raise L3Error("store refused (scripted)")
        if what == "hang":
            self.release.wait(30)

    def batch_exists(self, keys):
        self._step()
        return super().batch_exists(keys)

    def batch_get(self, keys):
        self._step()
        return super().batch_get(keys)

    def batch_set(self, keys, values):
        self._step()
        return super().batch_set(keys, values)


@pytest.fixture
def hanging() -> Iterator[Scripted]:
    store = Scripted("hang", "hang", "hang")
    yield store
    store.release.set()  # let the abandoned threads finish


def test_a_hung_store_answers_misses_within_the_deadline(hanging: Scripted) -> None:
    l3 = ResilientL3(hanging, FAST)
    assert l3.batch_get(["a", "b"]) == [None, None]  # answered by the deadline: both
    # calls time out and stay stuck (the 30 s hang did not end); no wall-clock bound
    counts = l3.faults.as_dict()
    assert counts["l3_timeouts"] == 2 and counts["l3_retries"] == 1 and counts["l3_errors"] == 1
    assert l3.down and l3.stuck_calls == 2


def test_a_down_store_is_skipped_then_probed_and_comes_back(hanging: Scripted) -> None:
    clock = FakeClock()
    l3 = ResilientL3(hanging, FAST, clock=clock)
    hanging.data["k"] = b"v"
    assert l3.batch_get(["k"]) == [None]
    calls = hanging.calls
    for _ in range(3):  # within the cooldown: answered at once, the store is not called
        assert l3.batch_exists(["k"]) == [False]
    assert hanging.calls == calls and l3.faults.as_dict()["l3_skipped"] == 3
    clock.t = 5.1  # cooldown over: one probe (one attempt), still hung -> cooldown doubles
    assert l3.batch_exists(["k"]) == [False] and hanging.calls == calls + 1
    clock.t = 10.0
    assert l3.batch_exists(["k"]) == [False] and hanging.calls == calls + 1  # 10 s cooldown
    hanging.release.set()
    clock.t = 15.2
    assert l3.batch_get(["k"]) == [b"v"]
    counts = l3.faults.as_dict()
    assert counts["l3_reconnects"] == 1 and not l3.down
    assert l3.batch_exists(["k"]) == [True]


def test_a_transient_error_is_retried_and_not_counted_as_a_fault() -> None:
    store = Scripted("fail")
    l3 = ResilientL3(store, FAST)
    assert l3.batch_set(["a"], [b"x"]) == [True]
    assert l3.faults.as_dict() | {"l3_retries": 0} == dict.fromkeys(l3.faults.as_dict(), 0)
    assert l3.faults.as_dict()["l3_retries"] == 1 and store.data == {"a": b"x"}


def test_persistent_errors_are_one_counted_miss_and_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    store = Scripted(*["fail"] * 20)
    l3 = ResilientL3(store, RetryPolicy(timeout_s=1, retries=2, backoff_s=0, cooldown_s=0))
    with caplog.at_level(logging.WARNING, logger="hicache.l3"):
        for _ in range(3):
            assert l3.batch_set(["a", "b"], [b"x", b"y"]) == [False, False]
    counts = l3.faults.as_dict()
    assert counts["l3_errors"] == 3
    errors = [r for r in caplog.records if "set of 2 keys failed" in r.getMessage()]
    assert len(errors) == 1 and "store refused" in errors[0].getMessage()


def test_a_partial_failure_keeps_the_other_answers_without_retrying() -> None:
    class HalfBroken(MemoryL3):
        calls = 0

        def batch_get(self, keys):
            self.calls += 1
            raise L3PartialError("get", [b"ok", None], {1: OSError(5, "EIO")})

    store = HalfBroken()
    l3 = ResilientL3(store, FAST)
    assert l3.batch_get(["a", "b"]) == [b"ok", None]
    assert store.calls == 1 and l3.faults.as_dict()["l3_errors"] == 1 and not l3.down


def test_contract_errors_still_raise() -> None:
    class Strict(MemoryL3):
        def batch_get(self, keys):
            raise ValueError("invalid L3 key")

    with pytest.raises(ValueError, match="invalid L3 key"):
        ResilientL3(Strict(), FAST).batch_get(["../x"])


def test_too_many_stuck_calls_mark_the_store_down_until_they_return(hanging: Scripted) -> None:
    clock = FakeClock()
    l3 = ResilientL3(hanging, RetryPolicy(timeout_s=0.1, retries=0, cooldown_s=1, max_stuck=1),
                     clock=clock)
    assert l3.batch_exists(["a"]) == [False] and l3.stuck_calls == 1
    clock.t = 2.0  # cooldown over, but one call is still stuck in the store: skip
    calls = hanging.calls
    assert l3.batch_exists(["a"]) == [False] and hanging.calls == calls
    hanging.release.set()
    deadline = time.monotonic() + 10
    while l3.stuck_calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert l3.stuck_calls == 0
    assert l3.batch_exists(["a"]) == [False] and hanging.calls == calls + 1  # probed again


def test_deadline_grows_with_the_bytes_moved() -> None:
    p = RetryPolicy(timeout_s=1.0, min_bytes_per_s=1e6)
    assert p.deadline(0) == 1.0 and p.deadline(2_000_000) == pytest.approx(3.0)
    assert [p.backoff(k) for k in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


@pytest.mark.parametrize("field, value", [("timeout_s", 0), ("retries", -1),
                                          ("cooldown_s", float("nan")), ("max_stuck", "4"),
                                          ("cooldown_max_s", 0.5), ("backoff_max_s", 0.01)])
def test_policy_rejects_bad_values_by_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        RetryPolicy(**{field: value})


def test_close_is_bounded_too(hanging: Scripted, caplog: pytest.LogCaptureFixture) -> None:
    hanging.close = lambda: hanging.release.wait(30)  # type: ignore[attr-defined]
    l3 = ResilientL3(hanging, FAST)
    with caplog.at_level(logging.WARNING, logger="hicache.l3"):
        l3.close()
    assert any("close() did not return" in r.getMessage() for r in caplog.records)
