"""ProcessGPURuntime: the RuntimeInterface of a runtime that lives in another process.

    ProcessGPURuntime(factory)          starts `python -m ipc.server`, sends it the factory
      .prepare_batch(plan) ──────────>  runtime.prepare_batch(plan)   one crossing each
      .execute_batch(handle) ────────>  runtime.execute_batch(handle)
      .poll() / .wait(timeout) ──────>  runtime.poll() / runtime.wait(timeout)
      .info()                           cached from the hello (fixed per generation)
      .now()                            local when the runtime's clock is the wall clock

Why ZeroMQ (pyzmq): it is what SGLang's scheduler, tokenizer and detokenizer processes
already speak, a PAIR socket over ``ipc://`` is a Unix-domain socket with message framing,
and ``poll(timeout)`` lets the caller watch the runtime process while it waits. Nothing
bulky crosses (plans and completions name pages, never hold KV), so there is no shared
memory segment: the KV stays in the runtime process, as the seed design wants.

Failure (the seed's recovery point): every call waits in short polls and checks that the
runtime process is alive; a dead process raises :class:`RuntimeProcessDied` at once, a
call with no answer after ``call_timeout_s`` (beyond the wait it asked for) kills the
process and raises it too. Afterwards every call raises until :meth:`restart`, which
starts a fresh runtime with the generation bumped: every handle the control side still
holds is then refused as stale (StaleHandleError).

Invariant: one call in flight at a time (the scheduler is synchronous); the crossing
counters count calls that reached the socket.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import zmq

from hicache.runtime.interface import (
    BatchPlan,
    Completion,
    PreparedBatchHandle,
    RuntimeInfo,
)
from hicache.timeline import Timeline
from ipc.errors import RuntimeProcessDied
from ipc.wire import Factory, dumps, loads

POLL_S = 0.02  # how often a waiting call checks that the runtime process lives


class ProcessGPURuntime:
    """A RuntimeInterface whose runtime runs in a child process (see the module doc)."""

    def __init__(self, factory: Factory, *, generation: int = 0, wall_clock: bool = False,
                 call_timeout_s: float = 30.0, start_timeout_s: float = 180.0) -> None:
        self.factory, self.generation, self.wall_clock = factory, generation, wall_clock
        self.call_timeout_s, self.start_timeout_s = call_timeout_s, start_timeout_s
        self.crossings: Counter[str] = Counter()
        self.bytes_sent = self.bytes_received = 0
        self.rpc_s = 0.0  # wall time of calls, round trip
        self.final_stats: dict[str, float] = {}  # the server's stats() when it was closed
        self._ctx = zmq.Context.instance()
        self._dead: str | None = None
        self._timeline: Timeline | None = None
        self._proc: Any = None
        self._sock: zmq.Socket | None = None
        self._dir: str | None = None
        self._issued: dict[int, PreparedBatchHandle] = {}  # prepared, not yet executed
        self._start()

    # ---- RuntimeInterface -------------------------------------------------------------
    def info(self) -> RuntimeInfo:
        return self._info

    def prepare_batch(self, plan: BatchPlan) -> PreparedBatchHandle:
        handle = self._call("prepare_batch", plan)
        self._issued[handle.batch_id] = handle
        return handle

    def execute_batch(self, handle: PreparedBatchHandle) -> None:
        """A handle equal (by value) to the one prepare returned crosses as its batch id;
        any other is sent whole, for the runtime to refuse or accept by its contract."""
        if self._issued.get(handle.batch_id) == handle:
            del self._issued[handle.batch_id]
            self._call("execute_ref", handle.batch_id, counted_as="execute_batch")
        else:
            self._call("execute_batch", handle)

    def poll(self) -> list[Completion]:
        return self._call("poll")

    def wait(self, timeout: float | None = None) -> list[Completion]:
        return self._call("wait", timeout, budget=timeout)

    # ---- driver helpers ---------------------------------------------------------------
    def now(self) -> float:
        if self._origin is not None:
            return time.perf_counter() - self._origin
        return self._call("now")

    def drain(self, timeout: float | None = None) -> bool:
        return self._call("drain", timeout, budget=timeout)

    def l3_faults(self) -> dict[str, int]:
        return self._call("l3_faults")

    @property
    def timeline(self) -> Timeline:
        """The runtime's timeline (fetched; kept from the last fetch once closed; empty if
        the process died before one was fetched)."""
        if self._sock is not None and self._dead is None:
            self._timeline = self._call("timeline")
        return self._timeline if self._timeline is not None else Timeline()

    def stats(self) -> dict[str, float]:
        """The server's counters: calls served, wall time in runtime methods, its CPU time."""
        return self._call("stats")

    def ipc_overhead_s(self, server: dict[str, float] | None = None) -> float:
        """Round-trip time of all calls less the server's time inside the runtime's
        methods (waits included): what crossing the process cost, pickling included."""
        server = server if server is not None else self.final_stats or self.stats()
        return max(0.0, self.rpc_s - server["runtime_s"])

    def apply(self, fn: Any, *args: Any) -> Any:
        """``fn(runtime, *args)`` in the runtime process (a probe for tests); ``fn`` must
        be importable there (a module-level function)."""
        return self._call("apply", fn, *args)

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def alive(self) -> bool:
        return self._dead is None and self._proc is not None and self._proc.poll() is None

    def restart(self) -> None:
        """Stop the runtime process (if it still runs) and start a fresh runtime with the
        generation bumped: every earlier handle is stale there."""
        self._stop(kill=True)
        self.generation += 1
        self._dead = None
        self._start()

    def close(self) -> None:
        if self._sock is None:
            return
        if self._dead is None:
            try:
                self.final_stats = self.stats()
                self._timeline = self._call("timeline")
                self._call("close")
            except RuntimeProcessDied:
                pass
        self._stop(kill=False)

    def __enter__(self) -> ProcessGPURuntime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals --------------------------------------------------------------------
    def _start(self) -> None:
        self._issued = {}
        self._dir = tempfile.mkdtemp(prefix="hicache-rt-")
        endpoint = f"ipc://{os.path.join(self._dir, 'runtime.sock')}"
        sock = self._ctx.socket(zmq.PAIR)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(endpoint)
        self._sock = sock
        # a fresh interpreter: no forked lane threads or CUDA state, and unlike
        # multiprocessing's spawn it does not re-run the caller's main module
        self._proc = subprocess.Popen([sys.executable, "-m", "ipc.server", endpoint])
        sock.send(dumps((list(sys.path),
                         dumps((self.factory, self.generation, self.wall_clock)))))
        reply = self._receive("start", self.start_timeout_s)
        if reply[0] == "err":
            self._stop(kill=True)
            raise reply[1]
        _, self._info, self._origin, self._pid = reply
        self.generation = self._info.generation

    def _call(self, method: str, *args: Any, budget: float | None = 0.0,
              counted_as: str | None = None) -> Any:
        """One crossing. ``budget``: how long the runtime may legitimately take (a wait's
        timeout; None = unbounded, liveness is still watched)."""
        if self._dead is not None:
            raise RuntimeProcessDied(self._dead)
        assert self._sock is not None
        t = time.perf_counter()
        data = dumps((method, args))
        self._sock.send(data)
        self.crossings[counted_as or method] += 1
        self.bytes_sent += len(data)
        limit = None if budget is None else budget + self.call_timeout_s
        status, value = self._receive(method, limit)
        self.rpc_s += time.perf_counter() - t
        if status == "err":
            raise value
        return value

    def _receive(self, method: str, limit: float | None) -> tuple:
        assert self._sock is not None
        deadline = None if limit is None else time.perf_counter() + limit
        while not self._sock.poll(int(POLL_S * 1000)):
            code = self._proc.poll()
            if code is not None:
                self._die(f"the runtime process (pid {self._proc.pid}) exited with "
                          f"{_describe(code)} during {method}()")
            if deadline is not None and time.perf_counter() > deadline:
                self._proc.kill()
                self._die(f"the runtime process (pid {self._proc.pid}) did not answer "
                          f"{method}() within {limit:g} s; killed it")
        data = self._sock.recv()
        self.bytes_received += len(data)
        return loads(data)

    def _die(self, why: str) -> None:
        self._dead = (f"{why}; generation {self.generation}'s handles are lost: fail the "
                      f"requests in flight, or restart() (generation {self.generation + 1})")
        raise RuntimeProcessDied(self._dead)

    def _stop(self, kill: bool) -> None:
        if self._proc is not None:
            if kill and self._proc.poll() is None:
                self._proc.kill()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _describe(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"
