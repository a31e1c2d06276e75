"""Measure a running Mooncake store into the profile's ``l3.mooncake`` section.

    measure_mooncake(client, value_bytes, concurrency) -> (section, table, sources)

One client (one replica: one NIC) with ``c`` threads in flight, for each ``c``:
``batch_exists`` of one key (a master round trip), ``batch_get`` / ``batch_set`` of one
small value (a transfer's fixed cost) and of ``keys_per_call`` large values (throughput:
bytes moved by all threads over the wall time). The fit is what :mod:`sim.l3` models:
``master_rpc_s`` = median exists latency at c = 1; ``latency_s`` = median small-get
latency at c = 1; ``nic_bytes_per_s`` = the best get throughput over c (reads and writes
share the NIC; the put table is kept beside it); on one machine the one storage process
is the store, so ``nodes`` = 1 and ``node_bytes_per_s`` = the best of get and put
throughput. The store's segment size is its capacity when we started it
(``--mooncake-local``); a store given by address keeps the default capacity.
Mooncake's calls release the GIL, so threads overlap their transfers (measured by the
throughput growing with c on the real store).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

SMALL = 4096  # bytes: a value whose transfer time is negligible next to the call's cost
REPEATS = 8  # latency samples per point


def measure_mooncake(client: Any, value_bytes: int = 1 << 20,
                     concurrency: Sequence[int] = (1, 2, 4, 8), keys_per_call: int = 4,
                     calls_per_thread: int = 4
                     ) -> tuple[dict[str, Any], list[list[float]], dict[str, str]]:
    """(the ``l3.mooncake`` keys measured, rows ``[c, get B/s, put B/s, get s, put s]``,
    a source note per key). ``client``: a MooncakeL3 (or anything with batch_exists /
    batch_get / batch_set)."""
    if value_bytes < SMALL or not concurrency or min(concurrency) < 1:
        raise ValueError(f"need value_bytes >= {SMALL} and concurrencies >= 1")
    prefix = uuid.uuid4().hex[:12]
    small = [f"{prefix}-small-{i}" for i in range(REPEATS)]
    client.batch_set(small, [bytes(SMALL)] * len(small))
    rpc = statistics.median(_timed(lambda k=k: client.batch_exists([k])) for k in small)
    latency = statistics.median(_timed(lambda k=k: client.batch_get([k])) for k in small)
    value = bytes(range(256)) * (value_bytes // 256) + bytes(value_bytes % 256)
    rows = []
    for c in concurrency:
        keys = [[f"{prefix}-c{c}-t{t}-{i}" for i in range(keys_per_call * calls_per_thread)]
                for t in range(c)]
        def batch(t: int, i: int, keys: list[list[str]] = keys) -> list[str]:
            return keys[t][i * keys_per_call:(i + 1) * keys_per_call]
        put_s, put_lat = _parallel(c, lambda t, i, b=batch: client.batch_set(
            b(t, i), [value] * keys_per_call), calls_per_thread)
        get_s, get_lat = _parallel(c, lambda t, i, b=batch: client.batch_get(b(t, i)),
                                   calls_per_thread)
        moved = c * calls_per_thread * keys_per_call * value_bytes
        rows.append([c, moved / get_s, moved / put_s, get_lat, put_lat])
    nic = max(r[1] for r in rows)
    section = {"master_rpc_s": rpc, "latency_s": latency, "nic_bytes_per_s": nic,
               "node_bytes_per_s": max(nic, max(r[2] for r in rows)), "nodes": 1}
    cs = ", ".join(str(c) for c in concurrency)
    src = {
        "master_rpc_s": f"measured: median batch_exists of 1 key ({REPEATS} calls)",
        "latency_s": f"measured: median batch_get of one {SMALL}-byte value ({REPEATS} calls)",
        "nic_bytes_per_s": f"measured: best get throughput of one client, {cs} threads, "
                           f"{keys_per_call} x {value_bytes} bytes per call "
                           f"(calibrated.l3_mooncake)",
        "node_bytes_per_s": "measured: best get or put throughput (one local storage "
                            "process serves it all)",
        "nodes": "one local storage process",
    }
    return section, rows, src


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _parallel(threads: int, call: Callable[[int, int], Any], calls: int
              ) -> tuple[float, float]:
    """``threads`` threads each making ``calls`` calls ``call(thread, i)``: (wall seconds
    for all, median seconds per call)."""
    lat: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(calls):
                d = _timed(lambda i=i: call(t, i))
                with lock:
                    lat.append(d)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
            errors.append(exc)
    pool = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in pool:
        th.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall, statistics.median(lat)


def calibrate_mooncake(prof: dict[str, Any], src: dict[str, str], *, master: str | None,
                       local: bool, value_bytes: int = 1 << 20) -> None:
    """Measure the store at ``master`` (or one started here when ``local``) into ``prof``
    (``l3.mooncake`` and ``calibrated.l3_mooncake``) and ``src``."""
    from gpu_backend.l3.mooncake import MooncakeL3
    from gpu_backend.l3.service import MooncakeService

    service = MooncakeService(segment_bytes=256 << 20) if local else None
    if service is not None:
        service.start()
        master = service.master_address
    assert master is not None
    try:
        client = MooncakeL3(master)
        try:
            section, rows, notes = measure_mooncake(client, value_bytes)
        finally:
            client.close()
    finally:
        if service is not None:
            service.stop()
    where = "a local store started for it" if local else f"the store at {master}"
    mc = prof.setdefault("l3", {}).setdefault("mooncake", {})
    mc.update(section)
    for k, note in notes.items():
        src[f"l3.mooncake.{k}"] = f"{note}; {where}"
    if service is not None:
        mc["capacity_bytes"] = float(service.segment_bytes)
        src["l3.mooncake.capacity_bytes"] = "the local store's segment"
    prof.setdefault("calibrated", {})["l3_mooncake"] = {
        "columns": ["concurrency", "get_bytes_per_s", "put_bytes_per_s", "get_call_s",
                    "put_call_s"], "value_bytes": value_bytes, "rows": rows}
