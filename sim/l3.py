"""L3 storage models shared by every replica that points at them (Mooncake, file/NVMe).

Invariant: contents are a set of page-hash keys with their sizes in LRU order; used bytes
never exceed ``capacity_bytes`` (the least recently used keys are evicted on insert). A key
becomes visible only when its write completes. Queries go in batches of N keys, each batch
one round trip (Mooncake: master RPC; file: latency_s), and stop at the first miss.
Concurrent transfers share the bandwidth of their direction equally (Mooncake: one figure
for reads and writes; file: separate read and write figures); each transfer is also capped
by the caller's host memory bandwidth (host-side staging).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator, Sequence
from typing import Any

import simpy

from sim.fluid import FluidJob, FluidServer
from sim.hardware.profile import FileSpec, MooncakeSpec


class L3Store:
    def __init__(self, env: simpy.Environment, *, name: str, capacity_bytes: float,
                 read_bytes_per_s: float, write_bytes_per_s: float, latency_s: float,
                 query_latency_s: float, shared: bool, duplex_shared: bool) -> None:
        self.env, self.name, self.shared = env, name, shared
        self.capacity = capacity_bytes
        self.bandwidth = {"read": read_bytes_per_s, "write": write_bytes_per_s}
        self.latency_s, self.query_latency_s = latency_s, query_latency_s
        self.duplex_shared = duplex_shared  # reads and writes share one bandwidth
        self.keys: OrderedDict[str, int] = OrderedDict()
        self.used = 0
        self.bytes_read = self.bytes_written = 0
        self.evictions = 0
        self.attached: set[str] = set()
        self.fluid = FluidServer(env, self._allocate)

    @classmethod
    def mooncake(cls, env: simpy.Environment, spec: MooncakeSpec) -> L3Store:
        return cls(env, name="mooncake", capacity_bytes=spec.capacity_bytes,
                   read_bytes_per_s=spec.bytes_per_s, write_bytes_per_s=spec.bytes_per_s,
                   latency_s=spec.latency_s, query_latency_s=spec.master_rpc_s, shared=True,
                   duplex_shared=True)

    @classmethod
    def file(cls, env: simpy.Environment, spec: FileSpec, shared: bool | None = None) -> L3Store:
        return cls(env, name="file", capacity_bytes=spec.capacity_bytes,
                   read_bytes_per_s=spec.read_bytes_per_s,
                   write_bytes_per_s=spec.write_bytes_per_s, latency_s=spec.latency_s,
                   query_latency_s=spec.latency_s,
                   shared=spec.shared if shared is None else shared, duplex_shared=False)

    def attach(self, runtime_id: str) -> None:
        """Register a replica; a non-shared backend serves one replica only."""
        if not self.shared and self.attached and runtime_id not in self.attached:
            raise ValueError(f"L3 {self.name!r} is not shared and already serves "
                             f"{sorted(self.attached)}; give {runtime_id!r} its own")
        self.attached.add(runtime_id)

    def _allocate(self, jobs: list[FluidJob]) -> None:
        groups: dict[str, list[FluidJob]] = {}
        for job in jobs:
            groups.setdefault("io" if self.duplex_shared else job.kind, []).append(job)
        for group in groups.values():
            for job in group:
                share = self.bandwidth[job.kind] / len(group)
                job.rate = share if job.cap is None else min(share, job.cap)

    def contains(self, key: str) -> bool:
        return key in self.keys

    def count_hits(self, keys: Sequence[str]) -> int:
        """Consecutive hits from the start of ``keys`` (no time passes)."""
        for i, key in enumerate(keys):
            if key not in self.keys:
                return i
        return len(keys)

    def query(self, keys: Sequence[str], batch: int
              ) -> Generator[simpy.Event, Any, list[tuple[float, float, int]]]:
        """Query in batches; returns [(start, end, hits)] per round trip, stopping at a miss."""
        if batch <= 0:
            raise ValueError("query batch must be > 0")
        trips = []
        for lo in range(0, len(keys), batch):
            start = self.env.now
            yield self.env.timeout(self.query_latency_s)
            chunk = keys[lo:lo + batch]
            hits = self.count_hits(chunk)
            trips.append((start, self.env.now, hits))
            if hits < len(chunk):
                break
        return trips

    def read(self, keys: Sequence[str], nbytes: int, cap: float | None
             ) -> Generator[simpy.Event, Any, None]:
        """Fetch ``keys`` (``nbytes`` in all); refreshes their LRU position."""
        yield self.env.timeout(self.latency_s)
        yield self.fluid.submit(FluidJob(nbytes, "read", cap))
        self.bytes_read += nbytes
        for key in keys:
            if key in self.keys:
                self.keys.move_to_end(key)

    def write(self, keys: Sequence[str], bytes_per_key: int, cap: float | None
              ) -> Generator[simpy.Event, Any, int]:
        """Write the keys not yet present; returns how many were written."""
        new = [k for k in dict.fromkeys(keys) if k not in self.keys]
        if not new:
            return 0
        nbytes = len(new) * bytes_per_key
        yield self.env.timeout(self.latency_s)
        yield self.fluid.submit(FluidJob(nbytes, "write", cap))
        self.bytes_written += nbytes
        for key in new:
            self._insert(key, bytes_per_key)
        return len(new)

    def _insert(self, key: str, size: int) -> None:
        if key in self.keys:
            self.keys.move_to_end(key)
            return
        if size > self.capacity:
            return
        while self.used + size > self.capacity:
            _, old = self.keys.popitem(last=False)
            self.used -= old
            self.evictions += 1
        self.keys[key] = size
        self.used += size
