"""The runtime process: one runtime behind a ZeroMQ socket, one call at a time.

    python -m ipc.server ENDPOINT       started by ProcessGPURuntime (no fork, no re-import
                                        of the caller's main module)
    boot   <- (sys.path, factory, generation, wall_clock)
    hello  -> ("hello", RuntimeInfo, clock origin or None, pid)
    loop:  recv (method, args) -> call the runtime -> send ("ok", value) | ("err", exc)

Invariants: calls run in arrival order on this process's main thread (the runtime's own
lanes do the concurrent work); a call that raises changes what the runtime's contract
says it changes (prepare is atomic) and the error goes back to the caller; the server
exits when told to close, or within ``ORPHAN_CHECK_S`` of its parent dying, so an
abandoned runtime never holds a GPU.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import zmq

from hicache.timeline import Timeline
from ipc.wire import METHODS, dumps, error_reply, loads

ORPHAN_CHECK_S = 1.0


class _Stats:
    def __init__(self) -> None:
        self.calls = 0
        self.runtime_s = 0.0  # wall time inside runtime methods
        self.cpu0 = time.process_time()

    def as_dict(self) -> dict[str, float]:
        return {"calls": self.calls, "runtime_s": self.runtime_s,
                "cpu_s": time.process_time() - self.cpu0}


def serve(endpoint: str) -> None:
    """Receive the boot message at ``endpoint``, build the runtime, greet, serve until
    closed. ``wall_clock`` (boot): the runtime's ``now()`` is ``time.perf_counter()``
    minus an origin (CLOCK_MONOTONIC, shared by every process on the machine), which the
    hello carries so the client reads the same clock without a crossing."""
    parent = os.getppid()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(endpoint)
    try:
        path, blob = loads(sock.recv())
        sys.path[:0] = [p for p in path if p not in sys.path]  # where the factory lives
        factory, generation, wall_clock = loads(blob)
        rt = factory(generation)
    except BaseException as e:  # noqa: BLE001 - the client reports why the start failed
        sock.send(error_reply(e))
        sock.close()
        ctx.term()
        return
    origin = time.perf_counter() - rt.now() if wall_clock else None
    sock.send(dumps(("hello", rt.info(), origin, os.getpid())))
    server = _Server(rt)
    try:
        server.loop(sock, parent)
    finally:
        close = getattr(rt, "close", None)
        if close is not None:
            close()
        sock.close()
        ctx.term()


class _Server:
    """Dispatch for one runtime. Keeps the handles it prepared (by batch id) until they
    are executed, so ``execute_ref`` names one by id and a batch's handle crosses once."""

    def __init__(self, rt: Any) -> None:
        self.rt, self.stats = rt, _Stats()
        self.prepared: dict[int, Any] = {}

    def loop(self, sock: zmq.Socket, parent: int) -> None:
        while True:
            if not sock.poll(int(ORPHAN_CHECK_S * 1000)):
                if os.getppid() != parent:
                    return  # the scheduler process is gone
                continue
            method, args = loads(sock.recv())
            self.stats.calls += 1
            try:
                if method not in METHODS:
                    raise ValueError(f"unknown runtime method {method!r}")
                t = time.perf_counter()
                try:
                    value = self.call(method, args)
                finally:
                    self.stats.runtime_s += time.perf_counter() - t
                reply = dumps(("ok", value))
            except BaseException as e:  # noqa: BLE001 - every error goes to the caller
                reply = error_reply(e)
            sock.send(reply)
            if method == "close":
                return

    def call(self, method: str, args: tuple) -> Any:
        rt = self.rt
        if method == "prepare_batch":
            handle = rt.prepare_batch(*args)
            self.prepared[handle.batch_id] = handle
            return handle
        if method == "execute_ref":  # (batch_id,): the handle this server prepared
            handle = self.prepared.pop(args[0])
            return rt.execute_batch(handle)
        if method == "execute_batch":
            self.prepared.pop(args[0].batch_id, None)
            return rt.execute_batch(*args)
        if method == "stats":
            return self.stats.as_dict()
        if method == "close":
            return None
        if method == "timeline":  # a runtime without one (a probe, a stub): an empty one
            return getattr(rt, "timeline", None) or Timeline()
        if method == "apply":  # a probe: fn(runtime, *args) for tests and benchmarks
            fn, *rest = args
            return fn(rt, *rest)
        return getattr(rt, method)(*args)


if __name__ == "__main__":
    serve(sys.argv[1])
