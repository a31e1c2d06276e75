"""The simulated runtime's data movement: the PCIe link and the fluid server that shares
it, the copy engines, the streams, the driver thread's lane, this replica's L3 client,
and how a batch's loads are grouped into ops and counted in copy calls.

Invariants: built once per runtime (restarts keep them: in-flight work of an older
generation drains through them); the streams are ``compute``, ``h2d``, ``d2h`` and the
host lane's ``cpu``; copy calls are counted from page runs (:func:`sim.host.copy_calls`),
never page by page; layer-wise load groups are frozen values, shared by every batch that
loads the same pages and calls per pool (:meth:`Transfers.load_groups`).
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from hicache.runtime.handles import Kind
from hicache.runtime.page_ids import Run
from hicache.tiers.l3_guard import RetryPolicy
from hicache.timeline import Timeline
from sim.batch import BatchState, GroupSteps, LoadGroup, group_steps
from sim.copy_engine import CopyEngines
from sim.cost import CostModel
from sim.fluid import FluidServer
from sim.hardware.profile import HardwareProfile
from sim.host import HostLane, copy_calls, interpreter_on
from sim.interpreter import Interpreter
from sim.l3 import L3Store
from sim.l3_client import L3Client
from sim.link import PcieLink
from sim.runtime_config import RuntimeConfig
from sim.streams import Stream

# a load: (pool, pages, source runs, destination runs), runs as (start, length)
Load = tuple[Kind, int, list[Run], list[Run]]


class Transfers:
    __slots__ = ("config", "link", "interpreter", "fluid", "copies", "streams", "host_lane",
                 "l3_client", "_groups", "_one_layer", "_mechanism", "_legacy")

    def __init__(self, env: simpy.Environment, profile: HardwareProfile, cost: CostModel,
                 timeline: Timeline, config: RuntimeConfig, io_backend: str) -> None:
        self.config = config
        self.link = PcieLink(profile)
        # the CPU runtime's threads share one interpreter lock (sim.interpreter)
        self.interpreter = interpreter_on(profile)
        spec = profile.host_cpu.interpreter
        self.fluid = (FluidServer(env, Interpreter(spec, self.link.allocate).allocate)
                      if self.interpreter and spec else
                      FluidServer(env, self.link.allocate, solo=self.link.solo_rate,
                                  shift=self.link.shift_rate))
        self.copies = CopyEngines(env, profile, self.link, self.fluid, io_backend,
                                  gil_calls=self.interpreter)
        self.copies.timeline = timeline
        self.streams = {n: Stream(env, n) for n in ("compute", "h2d", "d2h")}
        self.host_lane = HostLane(env, profile, cost, timeline, self.fluid)
        self.streams["cpu"] = self.host_lane.stream
        self.l3_client: L3Client | None = None  # this replica's NIC and guarded L3 calls
        self._mechanism = profile.io_kernel.mechanism
        self._legacy = "copy_calls" in profile.ablate
        self._one_layer = tuple(range(i, i + 1) for i in range(config.num_layers))
        # layer-wise load groups by what decides them (load_groups): batches that load
        # the same page and call counts share one tuple of (frozen) groups
        self._groups: dict[tuple[tuple[Kind, int, int], ...],
                           tuple[tuple[LoadGroup, ...], GroupSteps]] = {}

    def attach_l3(self, env: simpy.Environment, l3: L3Store, timeline: Timeline,
                  policy: RetryPolicy | None) -> None:
        """Give this replica its L3 client (its NIC), which the link also reads."""
        l3.attach(self.config.runtime_id)
        self.l3_client = L3Client(env, l3, self.fluid, timeline, policy=policy)
        self.link.l3 = self.l3_client

    def calls(self, pool: Kind, pages: int, src: Sequence[Run],
              dst: Sequence[Run], layers: range,
              host: Sequence[Run]) -> int:
        """Copy calls of one op moving ``pages`` pages, runs ``src`` -> ``dst``, over
        ``layers`` (sim.host); ``host`` is whichever of the two lives in L2."""
        cfg = self.config
        touched = (cfg.layers_touched[pool] if len(layers) == cfg.num_layers
                   else sum(1 for i in layers if cfg.layer_bytes[pool][i]))  # all: counted
        return self.calls_touching(pool, pages, src, dst, host, touched)

    def calls_touching(self, pool: Kind, pages: int, src: Sequence[Run],
                       dst: Sequence[Run], host: Sequence[Run],
                       touched: int) -> int:
        """:meth:`calls` of an op over ``touched`` layers that hold the pool's bytes."""
        return copy_calls(self.copies.io_backend, self._mechanism, self.config.mem_layout,
                          pages, src, dst, host, touched,
                          touched == self.config.layers_touched[pool], legacy=self._legacy)

    def load_groups(self, loads: list[Load]) -> tuple[tuple[LoadGroup, ...], GroupSteps]:
        """One h2d op per layer (layer-wise) or one for all layers, as the torch runtime.
        A load's calls depend on the layers it touches only through their count: counted
        once per load and count, not once per layer (byte and call sums are integers: any
        order gives the same). Layer-wise groups depend only on each pool's pages and
        one-layer calls: batches alike share one tuple (groups are frozen), with what a
        chain's steps read of it (:func:`sim.batch.group_steps`, computed once)."""
        cfg = self.config
        layers = cfg.num_layers
        if not cfg.layerwise:
            nbytes = calls = 0
            for pool, n, src, dst in loads:
                nbytes += cfg.bytes_per_page[pool] * n
                calls += self.calls(pool, n, src, dst, range(layers), src)  # src in L2
            one = (LoadGroup(range(layers), nbytes, calls),)
            return one, group_steps(one)
        # per pool, the pages and one-layer calls of its loads, summed: a layer's bytes are
        # its per-page bytes times the pages (integers: the same as load by load)
        pages: dict[Kind, int] = {}
        calls_of: dict[Kind, int] = {}
        for pool, n, src, dst in loads:
            pages[pool] = pages.get(pool, 0) + n
            calls_of[pool] = calls_of.get(pool, 0) + self.calls_touching(pool, n, src, dst,
                                                                         src, 1)
        key = tuple([(pool, n, calls_of[pool]) for pool, n in pages.items()])
        shared = self._groups.get(key)
        if shared is not None:
            return shared
        nbytes_at, calls_at = [0] * layers, [0] * layers
        for pool, n in pages.items():
            one = calls_of[pool]
            for i, b in enumerate(cfg.layer_bytes[pool]):
                if b:
                    nbytes_at[i] += b * n
                    calls_at[i] += one
        # one group per layer, its range shared by every batch (ranges are immutable)
        groups = tuple(map(LoadGroup, self._one_layer, nbytes_at, calls_at))
        if len(self._groups) >= 4096:  # a bound on a long run's distinct loads
            self._groups.clear()
        shared = self._groups[key] = (groups, group_steps(groups))
        return shared

    def backup_calls(self, st: BatchState) -> int:
        """Copy calls of the batch's one all-layer backup op."""
        # the torch runtime copies every backup of a pool in one op over their pages
        # concatenated, so runs continue across backups
        if not st.backups:
            return 0
        pools: dict[Kind, tuple[list[Run], list[Run]]] = {}
        for b in st.backups:
            src, dst = pools.setdefault(b.intent.src.pool, ([], []))
            src += b.src_runs
            dst += b.dst_runs
        return sum(self.calls(pool, sum(n for _, n in src), src, dst,
                              range(self.config.num_layers), dst)
                   for pool, (src, dst) in pools.items())
