"""L3 storage shared by the replicas that point at it (Mooncake, file/NVMe): contents,
storage nodes, service rate and fault state. Replicas reach it through their own
:class:`sim.l3_client.L3Client` (NIC, deadlines, retries).

    replica 0 ── NIC ─┐                       ┌─ node 0 ┐  each node serves node_bytes_per_s
    replica 1 ── NIC ─┼── store service ──────┼─ node 1 ┤  and holds capacity / nodes;
    ...               │  (split equally among  └─ ...   ┘  keys placed round-robin on live
                      │   replicas moving data)            nodes, evicted LRU (pooled)

Invariants: used bytes never exceed the live nodes' capacity (least recently used keys are
evicted on insert); a key becomes visible only when its write completes; a key lost with a
node (or a restarted master) is remembered in ``lost`` with the fault that lost it until
it is written again (what a healthy store would still hold: :meth:`truth_hits`). The store
serves ``service_rate(group)`` bytes/s in all, split equally among the replicas with
transfers in that group (Mooncake: one group for reads and writes; file: one each).
Keys enter only through :meth:`L3Store.insert`: a write that fits whole (no key's turn
can evict, every node live: the usual) places each key unless present in one go, asking
none first (:meth:`L3Store._place_all`); else it asks which are present, unless nothing
changed since its exists answer (:meth:`L3Store.missing_marked`: the ``version`` of the
contents it answered at). ``version`` counts the changes of the contents; a prefetch's
get trusts its queries' hits while none of them left the store since the version before
them (:meth:`L3Store.held`: no key left, or only keys evicted, remembered, and none of
them); a query remembers its hits the same way (``_hits``).
The LRU order: until the store first evicts, its contents are a plain dict (cheap to
fill) and a touch appends its keys to a log of runs to move to the end (a tuple; keys
placed while moves wait join it as their count: they follow those moves, and are the
dict's last keys, in turn); the log is applied, a touched run that a later run starts
with skipped (its keys all move again later), when the order is read (``keys``, a drop)
or the log outgrows the contents. From the first eviction on, the order is a deque of keys
(``_order``: the keys present when the log began, in their order, then the log's runs:
each key once, and again per touch) that touches and placed keys extend, a key's place
being its last entry (``_extra``: a key's entries beyond one, its touches', if any); an
eviction pops the front, and evicts a key at its last entry only (the earlier ones are
stale); a put's evictions are made for its last key's turn first, where the keys present
make room for all its keys. The deque keeps last entries only when it outgrows the
contents as the log does, or when the order is read (``keys``, a drop). Either way the
order is the one moving each key to the end at its touch gives
(tests/sim/test_l3_lru_log.py), and the contents stay a plain dict.
Fault state counts overlapping faults: ``refusing`` (down: every call fails at once),
``hanging`` (calls get no answer), and the set of nodes down.

``epoch`` counts the changes of what a client's L3 split reads (:meth:`sim.l3_client.
L3Client.allocate`): a transfer joining or leaving any client's fluid server (who is
moving), the store hanging or a node going down or coming back, a client's NIC faults,
a client attaching. While it holds, every client's split is what it was (sim.link
re-uses it); whatever changes those inputs must go through :meth:`bump`.
"""

from __future__ import annotations

from collections import _count_elements, deque  # type: ignore[attr-defined]
from collections.abc import Iterable, Sequence
from itertools import filterfalse, islice, takewhile
from typing import TYPE_CHECKING

import simpy

from hicache.runtime.interface import L3Key
from sim.hardware.profile import FileSpec, MooncakeSpec

if TYPE_CHECKING:
    from sim.l3_client import L3Client

# L3Store's log of LRU moves is applied (its order deque keeps last entries only) once it
# holds more keys than this many times the contents, plus the slack
LOG_FACTOR, LOG_SLACK = 8, 4096
# L3Store remembers the keys evicted since a version (``_gone``) until they are more than
# this many at the start of an eviction: then it starts anew from the version then
GONE_MAX = 1 << 16


class L3Store:
    # slotted: every event reads it, and from 30 attributes CPython 3.11 gives an instance
    # its own dict (a hashed lookup per read; ARCHITECTURE.md, RequestState)
    __slots__ = (
        '_extra', '_hits', '_keys', '_log', '_logged', '_next_node', '_order', '_removed_at',
        '_gone', '_gone_from', '_unchecked',
        'attached', 'bytes_read', 'bytes_written', 'clients', 'down_nodes', 'duplex_shared',
        'env', 'epoch', 'evictions', 'hanging', 'latency_s', 'lost', 'movers', 'name', 'nic',
        'node_capacity', 'nodes', 'query_latency_s', 'rate', 'refusing', 'shared', 'used',
        'version', 'went_down'
    )

    def __init__(self, env: simpy.Environment, *, name: str, capacity_bytes: float,
                 read_bytes_per_s: float, write_bytes_per_s: float, latency_s: float,
                 query_latency_s: float, shared: bool, duplex_shared: bool,
                 nic_bytes_per_s: float | None = None, nodes: int = 1) -> None:
        if nodes < 1:
            raise ValueError(f"L3 {name!r}: nodes must be >= 1, got {nodes}")
        self.env, self.name, self.shared = env, name, shared
        self.nodes = nodes
        self.node_capacity = capacity_bytes / nodes
        self.rate = {"read": read_bytes_per_s, "write": write_bytes_per_s,
                     "io": read_bytes_per_s}  # "io": reads and writes share one rate
        self.nic = nic_bytes_per_s  # each replica's NIC (None: no network in between)
        self.latency_s, self.query_latency_s = latency_s, query_latency_s
        self.duplex_shared = duplex_shared
        # the contents, key -> (bytes, node), least recently used first once ``_log`` is
        # applied until the first eviction (the LRU moves logged: cheap to fill), in
        # ``_order`` from then on (module doc: the LRU order)
        self._keys: dict[L3Key, tuple[int, int]] = {}
        # runs of keys to move to the end, in turn: touched (tuples), placed (their count:
        # the dict's next keys from its keys placed before the log's first placed run)
        self._log: list[tuple[L3Key, ...] | int] = []
        self._logged = 0  # keys in ``_log``
        self._unchecked = 0  # touched runs in ``_log`` not proved present (touch)
        # from the first eviction: every key once or more, a key's last entry its place,
        # and the keys with more than one entry -> how many more (None, empty: no eviction
        # yet)
        self._order: deque[L3Key] | None = None
        self._extra: dict[L3Key, int] = {}
        self.used = 0
        self.bytes_read = self.bytes_written = 0  # served to and taken from replicas
        self.evictions = 0
        self.lost: dict[L3Key, int] = {}  # key -> index of the fault that lost it
        self.attached: set[str] = set()
        self.clients: list[L3Client] = []
        # the clients with an L3 job under way (one group: duplex_shared), kept by each
        # client as its jobs join and leave (L3Client._jobs_changed): share's count
        self.movers = 0
        self.refusing: list[int] = []  # faults (indices) making every call fail now
        self.hanging: list[int] = []  # faults making calls go unanswered
        self.down_nodes: set[int] = set()
        self.went_down = env.event()  # fires when the store starts refusing
        self._next_node = 0
        self.epoch = 0  # bumped whenever an input of the clients' L3 split changes
        # ``version`` counts the changes of the contents (a batch of keys placed, keys
        # evicted or dropped; :meth:`missing_marked`, :meth:`insert`), ``_removed_at`` is
        # the version of the last removal (:meth:`kept_since`)
        self.version = self._removed_at = 0
        # :meth:`count_hits`' answers (first key -> the keys asked, the hits found, the
        # version then) while no key left the store: a later query of the same keys
        # starts after them (a conversation's prefix, asked again every turn)
        self._hits: dict[L3Key, tuple[Sequence[L3Key], int, int]] = {}
        # the keys evicted since the version ``_gone_from`` (every key that left the store
        # after it, none dropped): a key found present at that version or after it, and
        # none of them, is present still (:meth:`held`)
        self._gone: set[L3Key] = set()
        self._gone_from = 0

    def bump(self) -> None:
        """An input of the clients' L3 split changed (module doc: ``epoch``)."""
        self.epoch += 1

    @classmethod
    def mooncake(cls, env: simpy.Environment, spec: MooncakeSpec) -> L3Store:
        return cls(env, name="mooncake", capacity_bytes=spec.capacity_bytes,
                   read_bytes_per_s=spec.store_bytes_per_s,
                   write_bytes_per_s=spec.store_bytes_per_s, latency_s=spec.latency_s,
                   query_latency_s=spec.master_rpc_s, shared=True, duplex_shared=True,
                   nic_bytes_per_s=spec.nic_bytes_per_s, nodes=spec.nodes)

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

    # ---- service: the rate all replicas share ------------------------------------------
    def group(self, direction: str) -> str:
        return "io" if self.duplex_shared else direction

    @property
    def live_nodes(self) -> int:
        return self.nodes - len(self.down_nodes)

    @property
    def capacity(self) -> float:
        return self.node_capacity * self.live_nodes

    def service_rate(self, group: str) -> float:
        """Bytes/s the live nodes serve in ``group``; 0 while the store hangs."""
        if self.hanging:
            return 0.0
        return self.rate[group] * self.live_nodes / self.nodes

    def share(self, group: str) -> float:
        """One moving replica's share of :meth:`service_rate` (equal split)."""
        if self.duplex_shared:  # one group: the clients moving any L3 job, counted
            return self.service_rate(group) / (self.movers or 1)
        active = sum(1 for c in self.clients if c.moving(group)) or 1
        return self.service_rate(group) / active

    def changed(self, source: L3Client | None = None) -> None:
        """Rates changed (a replica started or stopped moving data, a fault): the other
        replicas re-plan their transfers."""
        for c in self.clients:
            if c is not source:
                c.replan()

    # ---- contents ----------------------------------------------------------------------
    @property
    def keys(self) -> dict[L3Key, tuple[int, int]]:
        """The contents, key -> (bytes, node), least recently used first (a copy once the
        store has evicted)."""
        if self._order is not None:
            keys = self._keys
            return {k: keys[k] for k in self._compact()}
        if self._log:
            self._replay()
        return self._keys

    def contains(self, key: L3Key) -> bool:
        return key in self._keys

    def contains_each(self, keys: Iterable[L3Key]) -> list[bool]:
        """:meth:`contains` of each key, in order."""
        return list(map(self._keys.__contains__, keys))

    def missing(self, keys: Iterable[L3Key]) -> list[L3Key]:
        """The keys the store lacks, in order (those :meth:`contains_each` says False)."""
        return list(filterfalse(self._keys.__contains__, keys))

    def missing_marked(self, keys: Sequence[L3Key]) -> tuple[Sequence[L3Key], int]:
        """:meth:`missing`, and the contents' ``version`` it answered at: the mark to give
        :meth:`insert` with those keys (``absent_at``). New pages' keys (the usual) are
        all missing: asked in one C loop (``isdisjoint``), and answered as given when a
        tuple (immutable: not copied), else copied."""
        present = self._keys.keys()
        if present.isdisjoint(keys):
            return keys if type(keys) is tuple else list(keys), self.version
        return list(filterfalse(present.__contains__, keys)), self.version

    def count_hits(self, keys: Sequence[L3Key]) -> int:
        """Consecutive hits from the start of ``keys`` (no time passes).

        A query of keys whose start an earlier query of a tuple found present (the same
        first key, then equal keys up to its hits: ``_hits``) while none of them left the
        store since (:meth:`held`) finds them present still: it asks from there on only."""
        if not keys:
            return 0
        first = keys[0]
        known = self._hits.get(first)
        start = 0
        if known is not None:
            seen, hits, mark = known
            start = min(hits, len(keys))
            if keys[:start] != seen[:start] or not self.held(seen[:start], mark):
                start = 0
        n = start + len(list(takewhile(self._keys.__contains__, keys[start:] if start else keys)))
        if n and type(keys) is tuple:  # (immutable: what it remembers stays what was asked)
            self._hits[first] = (keys, n, self.version)
        return n

    def truth_hits(self, keys: Sequence[L3Key]) -> tuple[int, int | None]:
        """Consecutive hits a store without faults would report (lost keys count), and the
        fault that lost the first lost key among them (None: nothing lost)."""
        blame = None
        for i, key in enumerate(keys):
            if key in self._keys:
                continue
            fault = self.lost.get(key)
            if fault is None:
                return i, blame
            blame = fault if blame is None else blame
        return len(keys), blame

    def kept_since(self, mark: int) -> bool:
        """Whether no key has left the store since its ``version`` was ``mark``: then every
        key present at that version or after it is present now (keys leave only evicted
        or dropped, and either marks the version: :meth:`_removed`)."""
        return self._removed_at <= mark

    def held(self, keys: Iterable[L3Key], mark: int) -> bool:
        """Whether ``keys``, each found present at the version ``mark`` or after it, are all
        present still: no key left the store since (:meth:`kept_since`), or only evicted
        keys left since and none of these (``_gone``, when it holds every key that left
        since ``mark``: a key present at version v that left did so at a version after v,
        and a drop starts ``_gone`` anew after its keys left)."""
        return self._removed_at <= mark or (
            mark >= self._gone_from and self._gone.isdisjoint(keys))

    def _gone_anew(self) -> None:
        """Forget the keys evicted so far: ``_gone`` holds every key that leaves from now on
        (at a later version than now). Called before an eviction's first key leaves, or
        after a drop's last one; the answers remembered are forgotten with them."""
        self._gone = set()
        self._gone_from = self.version
        self._hits.clear()

    def touch(self, keys: Sequence[L3Key], checked: bool = False) -> None:
        """Refresh the LRU position of ``keys``, all present (a :meth:`count_hits` prefix,
        no time passed), in order: added to ``_order`` and counted once the store has
        evicted (an absent key is a KeyError, nothing moved), else logged (``_log``:
        applied when the order is read; an absent key is a KeyError then).
        ``checked``: the caller proved every key present (a :meth:`count_hits` prefix
        just found, or hits held since: :meth:`sim.l3_client.L3Client._got`), so none is
        asked again (nor, logged, when the first eviction orders the log:
        ``_unchecked`` counts the logged runs not proved)."""
        order = self._order
        if order is not None:
            if not checked and not all(map(self._keys.__contains__, keys)):
                raise KeyError(next(filterfalse(self._keys.__contains__, keys)))
            order.extend(keys)
            _count_elements(self._extra, keys)
            if len(order) > LOG_FACTOR * len(self._keys) + LOG_SLACK:
                self._compact()
        elif keys:
            if not checked:
                self._unchecked += 1
            self._logs(keys if type(keys) is tuple else tuple(keys))

    def _logs(self, run: tuple[L3Key, ...] | int) -> None:
        """Log ``run`` to move to the end: keys touched (a tuple), or as many keys placed
        while moves wait (a count: the dict's last keys, in turn); the log is applied
        once it outgrows the contents (a bound on what it holds)."""
        self._log.append(run)
        self._logged += run if type(run) is int else len(run)
        if self._logged > LOG_FACTOR * len(self._keys) + LOG_SLACK:
            self._replay()

    def _replay(self) -> None:
        """Apply ``_log``: each run's keys moved to the end in turn (popped and placed
        again: a plain dict), less the runs that a later run starts with
        (:meth:`_kept_runs`; placed runs' keys read before any moves)."""
        keys = self._keys
        pop = keys.pop
        runs = self._kept_runs()
        it = islice(keys, len(keys) - sum(r for r in runs if type(r) is int), None)
        for run in [tuple(islice(it, r)) if type(r) is int else r for r in runs]:
            keys.update(zip(run, map(pop, run), strict=True))

    def _kept_runs(self) -> list[tuple[L3Key, ...] | int]:
        """Empty ``_log``; its runs in turn less the touched ones that a later run starts
        with (their keys all move again later, and only a key's last move decides its
        place). Placed runs are all kept (each key placed once: :meth:`_ordered`); none
        starts with a key present before it, so none is a later touched run's start."""
        log, self._log, self._logged, self._unchecked = self._log, [], 0, 0
        later: dict[L3Key, tuple[L3Key, ...]] = {}  # first key -> a later run from it
        keep: list[tuple[L3Key, ...] | int] = []
        for run in reversed(log):
            if type(run) is int:
                keep.append(run)
                continue
            seen = later.get(run[0])
            if seen is not None and len(seen) >= len(run) and seen[:len(run)] == run:
                continue
            if seen is None or len(run) > len(seen):
                later[run[0]] = run
            keep.append(run)
        keep.reverse()
        return keep

    def _ordered(self) -> None:
        """From the first eviction on, keep the order in ``_order``: the keys present when
        the log began, in their order (the dict's first keys: those placed since are its
        last, each in one placed run), then the log's runs, so that each key has one
        entry and one more per touched run holding it, counted in ``_extra`` (no key
        moved; a touched key absent is a KeyError, asked unless every touched run logged
        was proved present: ``_unchecked``)."""
        if self._order is None:
            keys = self._keys
            unchecked = self._unchecked
            runs = self._kept_runs()
            it = iter(keys)  # (the dict's keys in turn: those before the log, then placed)
            order = deque(islice(it, len(keys) - sum(r for r in runs if type(r) is int)))
            extra: dict[L3Key, int] = {}
            for run in runs:
                if type(run) is int:
                    order.extend(islice(it, run))
                else:
                    order.extend(run)
                    _count_elements(extra, run)
            if unchecked and not keys.keys() >= extra.keys():
                raise KeyError(next(k for k in extra if k not in keys))
            self._order, self._extra = order, extra

    def _compact(self) -> deque[L3Key]:
        """Keep the last entry of each key in ``_order`` only (the order: it is each
        key's last entry's); returns it."""
        order = self._order
        assert order is not None
        if len(order) > len(self._keys):
            last = dict.fromkeys(reversed(order))
            self._order = order = deque(reversed(last))
            self._extra = {}
        return order

    def insert(self, keys: Iterable[L3Key], size: int, absent_at: int | None = None) -> int:
        """Place the keys not yet present on live nodes (round-robin); returns how many
        were written. Raises :class:`NoLiveNode` when every node is down.

        Where no key's turn can evict, even were every key new (:meth:`_fits`), the keys
        are placed in one go without asking which are present (:meth:`_place_all`).
        Else the keys present are found first, unless nothing has changed since the
        ``version`` ``absent_at`` at which every key was absent (a :meth:`missing_marked`
        answer): all absent then, or when the store holds none of them (asked first)."""
        new = list(keys)
        if self._fits(len(new), size):
            return self._place_all(new, size)
        # every key absent (one may repeat): else the keys not present; once each
        fresh = dict.fromkeys(new)
        if absent_at == self.version or self._keys.keys().isdisjoint(new):
            new = list(fresh)
        else:
            new = list(filterfalse(self._keys.__contains__, fresh))
        if new and not self.live_nodes:
            raise NoLiveNode(f"L3 {self.name!r}: all {self.nodes} nodes are down")
        if size > self.node_capacity:
            return 0  # no node holds it
        limit = self.capacity - size  # the live nodes do not change while this runs
        ahead = (len(new) - 1) * size  # the bytes placed before the last key's turn
        if new and type(size) is int and type(self.used) is int and ahead <= limit:
            # the keys present make room for every key's turn: made for the last turn
            # first, it evicts the keys the turns would in turn (the least recently used
            # prefix that the last turn needs), and no key's turn evicts then
            self._evict(limit, ahead)
            if self._fits(len(new), size):
                return self._place_all(new, size)
        if new:  # a key's turn may evict (or nodes are down): keep the order as it goes
            self._ordered()
        keys, lost = self._keys, self.lost
        nodes, spread = self.nodes, not self.down_nodes  # every node live: _place's turn
        order = self._order
        assert order is not None or not new
        if len(self._gone) > GONE_MAX:
            self._gone_anew()
        evicted = False
        for key in new:
            if self.used > limit:
                self._pop_lru(limit)
                evicted = True
            if spread:
                node = self._next_node % nodes
                self._next_node += 1
            else:
                node = self._place()
            keys[key] = (size, node)
            order.append(key)  # type: ignore[union-attr]
            self.used += size
            if lost:
                lost.pop(key, None)
        if evicted:
            self._removed()
        self.bytes_written += len(new) * size
        if new:
            self.version += 1
        return len(new)

    def _fits(self, n: int, size: int) -> bool:
        """Whether ``n`` keys of ``size`` bytes, all new, are placed without any key's
        turn evicting, on every node in turn: every node is live, a node holds ``size``
        and the bytes fit (integers: the sums are exact)."""
        return (n > 0 and not self.down_nodes and size <= self.node_capacity
                and type(size) is int and type(self.used) is int
                and self.used + (n - 1) * size <= self.capacity - size)

    def _place_all(self, new: list[L3Key], size: int) -> int:
        """Place the keys of ``new`` not present (:meth:`_fits` for all of them) in one
        go, on the nodes in turn, as key after key would: each placed unless present
        (``setdefault``: a present key keeps its value and place); when fewer were
        placed than given (some present, or repeated), the keys placed are those holding
        one of this call's own value tuples, and take their nodes in turn again."""
        nodes = self.nodes
        n = len(new)
        turn = self._next_node % nodes
        places = [(size, node) for node in range(nodes)]
        # the nodes in turn from ``turn``, at least one per key (map and zip stop at the
        # last key)
        turns = (places[turn:] + places[:turn]) * (n // nodes + 1)
        keys = self._keys
        before = len(keys)
        deque(map(keys.setdefault, new, turns), maxlen=0)
        if len(keys) - before < n:  # this call's tuples: no value held before was one
            ours = set(map(id, places))
            new = [k for k in dict.fromkeys(new) if id(keys[k]) in ours]
            n = len(new)
            if not n:
                return 0
            keys.update(zip(new, turns, strict=False))  # (placed keys keep their place)
        self._next_node += n
        self.used += n * size
        lost = self.lost
        if lost:
            for key in new:
                lost.pop(key, None)
        self.bytes_written += n * size
        self.version += 1
        order = self._order
        if order is not None:  # (keys new to the store: one entry each)
            order.extend(new)
        elif self._log:  # placed after the moves that wait: they move after them
            self._logs(n)  # (the dict's last n keys)
        return n

    def _removed(self) -> None:
        """Keys left the store (evicted, dropped): the answers remembered (``_hits``) hold
        while none of their keys left (:meth:`held`)."""
        self.version += 1
        self._removed_at = self.version

    def _evict(self, limit: float, ahead: int = 0) -> None:
        """Evict least recently used keys until ``used + ahead <= limit`` (one change of
        the contents)."""
        if not (self.used + ahead > limit and self._keys):
            return
        self._ordered()
        if len(self._gone) > GONE_MAX:
            self._gone_anew()
        self._removed()
        self._pop_lru(limit, ahead)

    def _pop_lru(self, limit: float, ahead: int = 0) -> None:
        """Evict keys from the front of ``_order`` (present) until ``used + ahead <=
        limit`` (stale entries popped on the way), each remembered in ``_gone``; the
        caller marks the change (:meth:`_removed`)."""
        keys = self._keys
        order, extra = self._order, self._extra
        assert order is not None
        popleft, gone = order.popleft, self._gone.add
        used, evicted = self.used, 0
        while used + ahead > limit and keys:
            key = popleft()
            n = extra.get(key)
            if n:  # a stale entry: the key moved since
                if n > 1:
                    extra[key] = n - 1
                else:
                    del extra[key]
                continue
            old, _ = keys.pop(key)
            gone(key)
            used -= old
            evicted += 1
        self.used = used
        self.evictions += evicted

    def _place(self) -> int:
        for _ in range(self.nodes):
            node = self._next_node % self.nodes
            self._next_node += 1
            if node not in self.down_nodes:
                return node
        raise NoLiveNode(f"L3 {self.name!r}: all {self.nodes} nodes are down")

    def drop(self, fault: int, node: int | None = None) -> int:
        """Lose the keys of ``node`` (None: all of them) to ``fault``; returns how many."""
        keys = self._keys
        if self._order is not None:
            lru: Iterable[L3Key] = self._compact()
        else:
            if self._log:
                self._replay()
            lru = keys
        gone = [k for k in lru if node is None or keys[k][1] == node]
        if gone:
            self._removed()
        for key in gone:
            size, _ = keys.pop(key)
            self.used -= size
            self.lost[key] = fault
        if gone:
            self._gone_anew()  # (keys dropped are not in _gone)
        if gone and self._order is not None:  # (last entries only: one each)
            self._order = deque(filter(keys.__contains__, self._order))
            self._extra = {}
        return len(gone)

    # ---- fault state (sim.faults switches it) -------------------------------------------
    def refuse(self, fault: int, on: bool) -> None:
        toggle(self.refusing, fault, on)
        self.bump()  # no rate reads it; counted all the same
        if on and not self.went_down.triggered:
            self.went_down.succeed()
        elif not self.refusing:
            self.went_down = self.env.event()

    def hang(self, fault: int, on: bool) -> None:
        toggle(self.hanging, fault, on)
        self.bump()
        self.changed()

    def node_down(self, node: int, on: bool) -> None:
        """Take ``node`` out (drop its keys first: :meth:`drop`) or bring it back empty."""
        if on:
            self.down_nodes.add(node)
            self._evict(self.capacity)
        else:
            self.down_nodes.discard(node)
        self.bump()
        self.changed()


class NoLiveNode(RuntimeError):
    """Every storage node is down: a write has nowhere to go (an L3 error, never raised out
    of a runtime)."""


def toggle(active: list[int], fault: int, on: bool) -> None:
    """Add ``fault`` to (or remove it from) the list of those active."""
    if on:
        active.append(fault)
    else:
        active.remove(fault)
