"""ResilientL3: every call to an L3 client bounded in time, retried, and never raised.

    call ──> [down? skip] ──> attempt on a daemon thread ──wait(deadline)──> result
                                 │ error / timeout: back off, retry (bounded)
                                 └ all failed: count, warn once, mark down, answer a miss

Invariants:
- a call returns within ``attempts * deadline + backoffs``; a hung client call is abandoned
  on its own daemon thread (the Mooncake calls release the GIL, so it blocks nothing else)
  and at most ``max_stuck`` such threads exist before the store counts as down;
- a failure is an answer, not an exception: misses (None / False) for the keys it hit,
  counted in :class:`L3Faults`; contract errors (ValueError, TypeError) still raise;
- after a failed operation the store is *down* for a cooldown (calls are skipped, counted
  as ``l3_skipped``); then one call probes it, and success brings it back
  (``l3_reconnects``), failure doubles the cooldown up to ``cooldown_max_s``.
Mooncake clients reconnect by themselves once the master answers (measured), and a fresh
``setup()`` holds the GIL while it blocks, so the probe reuses the client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpu_backend.l3.base import L3PartialError
from gpu_backend.l3.faults import L3Faults
from hicache.tiers.l3_guard import L3Health, RetryPolicy

__all__ = ["ResilientL3", "RetryPolicy"]


class _Timeout(Exception):
    pass


class ResilientL3:
    """Wraps any L3 client (``batch_exists/get/set``, optional ``batch_remove``, ``close``)."""

    def __init__(self, inner: Any, policy: RetryPolicy | None = None,
                 faults: L3Faults | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self.faults = faults if faults is not None else L3Faults(type(inner).__name__)
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._stuck = 0
        self._health = L3Health(self.policy)  # the policy's state machine (hicache.tiers)
        self._value_bytes = 0  # largest value seen: sizes the deadline of a get

    @property
    def down(self) -> bool:
        with self._lock:
            return self._health.down

    @property
    def stuck_calls(self) -> int:
        with self._lock:
            return self._stuck

    # ---- the client contract ---------------------------------------------------------
    def batch_exists(self, keys: list[str]) -> list[bool]:
        return self._call("exists", self.inner.batch_exists, (keys,), [False] * len(keys), 0)

    def batch_get(self, keys: list[str]) -> list[bytes | None]:
        out = self._call("get", self.inner.batch_get, (keys,), [None] * len(keys),
                         len(keys) * self._value_bytes)
        self._value_bytes = max([self._value_bytes, *(len(v) for v in out if v is not None)])
        return out

    def batch_set(self, keys: list[str], values: list[bytes]) -> list[bool]:
        self._value_bytes = max([self._value_bytes, *(len(v) for v in values)])
        return self._call("set", self.inner.batch_set, (keys, values), [False] * len(keys),
                          sum(len(v) for v in values))

    def batch_remove(self, keys: list[str]) -> list[bool]:
        remove = getattr(self.inner, "batch_remove", None)
        if remove is None:
            return [False] * len(keys)
        return self._call("remove", remove, (keys,), [False] * len(keys), 0)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is None:
            return
        limit = self.policy.timeout_s + self.policy.close_grace_s
        try:
            self._attempt("close", close, (), limit)
        except _Timeout:
            self.faults.warn("close", f"close() did not return within {limit:.3g} s; abandoned")
        except Exception as exc:  # noqa: BLE001 - closing must not lose a finished run
            self.faults.warn("close", f"close() failed: {exc!r}")

    # ---- internals -------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., Any], args: tuple, miss: list,
              nbytes: int) -> list:
        if not args[0]:
            return fn(*args)
        probe = self._admit()
        if probe is None:
            self.faults.count("l3_skipped")
            return miss
        deadline = self.policy.deadline(nbytes)
        last = ""
        for attempt in range(self.policy.attempts(probe)):
            if attempt:
                self.faults.count("l3_retries")
                self._sleep(self.policy.backoff(attempt - 1))
            try:
                result = self._attempt(what, fn, args, deadline)
            except _Timeout:
                self.faults.count("l3_timeouts")
                self.faults.warn("timeout", f"{what} of {len(args[0])} keys timed out after "
                                            f"{deadline:.3g} s")
                last = f"timed out after {deadline:.3g} s"
                continue
            except L3PartialError as exc:
                self.faults.count("l3_errors", len(exc.errors))
                self.faults.warn("error", f"{exc}: those pages are misses")
                self._answered()
                return exc.results
            except (ValueError, TypeError):
                raise
            except Exception as exc:  # noqa: BLE001 - any store failure is a miss
                last = repr(exc)
                continue
            self._answered()
            return result
        self.faults.count("l3_errors")
        self.faults.warn("error", f"{what} of {len(args[0])} keys failed ({last}); "
                                  f"answered as misses")
        self._failed(what, last)
        return miss

    def _admit(self) -> bool | None:
        """False: a normal call; True: this call probes a down store; None: skip it."""
        with self._lock:
            if self._stuck >= self.policy.max_stuck:
                return None
            admission = self._health.admit(self._clock())
        return None if admission == "skip" else admission == "probe"

    def _answered(self) -> None:
        with self._lock:
            was_down = self._health.answered()
        if was_down:
            self.faults.count("l3_reconnects")
            self.faults.warn("reconnect", "the store answers again; L3 hits resume")

    def _failed(self, what: str, why: str) -> None:
        with self._lock:
            cooldown = self._health.failed(self._clock())
        self.faults.warn("down", f"marked down for {cooldown:.3g} s (doubling up to "
                                 f"{self.policy.cooldown_max_s:.3g} s while it stays down) "
                                 f"after {what} failed ({why})")

    def _attempt(self, what: str, fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
        """``fn(*args)`` on a daemon thread; raise :class:`_Timeout` past ``timeout``."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                box["error"] = exc
            finally:
                with self._lock:
                    done.set()
                    if box.get("abandoned"):
                        self._stuck -= 1

        threading.Thread(target=run, name=f"l3-{what}", daemon=True).start()
        if not done.wait(timeout):
            with self._lock:
                if not done.is_set():
                    box["abandoned"] = True
                    self._stuck += 1
                    raise _Timeout
        if "error" in box:
            raise box["error"]
        return box["value"]
