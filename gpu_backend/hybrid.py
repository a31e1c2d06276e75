"""Hybrid models on the torch runtime: SWA and MAMBA pools, the data behind them, and a
synthetic model whose layers are full attention, sliding-window attention or recurrent.

    pools       full  (2, full layers, pages, page, H, D)   paged KV, as before
                swa   (2, swa layers, pages, page, H, D)    one SWA page per KV page, freed
                                                            once wholly behind the window
                mamba (slots, mamba layers, hidden)         one private state per request,
                                                            checkpoints are copies
    bookkeeping :class:`hicache.runtime.state.StateKeeper`, the simulator's own, so both
                runtimes hold the same pages for the same plans

Copy-on-write: a request that attaches a cached MAMBA checkpoint gets a copy of it in its
private slot before its first layer; a checkpoint slice copies the private state into a new
slot after its last layer. The cached slot is only ever read.

Pages a slice frees behind the window at prepare (the simulator's accounting) may still be
read by that slice's first queries, so here they are freed only when the batch has run
(:meth:`StateData.flush`, fenced on its compute); the scheduler's per-request SWA bound
(2 windows + a chunk) covers holding them that long.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gpu_backend.model import BatchIndex, SliceSpec, SyntheticModel, paged_attention
from gpu_backend.page_fences import PageFences
from gpu_backend.pools import DevicePool, PageAllocator
from gpu_backend.shapes import ModelShape
from gpu_backend.streams import LaneEvent
from hicache.runtime.handles import CacheExtentRef, Kind, Tier
from hicache.runtime.interface import RequestSlice
from hicache.runtime.state import StateKeeper

STATE_POOLS = (Kind.SWA, Kind.MAMBA)


class _DeferredPool:
    """A StatePool over a fenced allocator whose frees wait for the batch being prepared."""

    def __init__(self, alloc: PageAllocator, pending: list[int]) -> None:
        self.alloc, self.pending = alloc, pending
        self.last: list[int] = []  # the pages the latest allocate handed out

    def allocate(self, n: int) -> list[int]:
        self.last = self.alloc.alloc(n)
        return self.last

    def free(self, pages: Sequence[int]) -> None:
        self.pending.extend(pages)


@dataclass(frozen=True, slots=True)
class StateSpec:
    """What a slice's compute needs of the state pools."""

    swa_pages: tuple[int, ...]  # SWA page per KV page index, -1 where none is held
    slot: int  # the request's private MAMBA slot (-1: no mamba)
    copy_in: int = -1  # before layer 0: copy this checkpoint slot into ``slot`` (COW)
    fresh: bool = False  # before layer 0: zero ``slot`` (a new request, no checkpoint)
    copy_out: int = -1  # after the last layer: copy ``slot`` into this checkpoint slot


class StateData:
    """The SWA and MAMBA pools of one runtime: allocators, tensors and bookkeeping."""

    def __init__(self, shape: ModelShape, device_pages: dict[Kind, int], page_size: int,
                 runtime_id: str, generation: int, dtype: torch.dtype, device: str,
                 fences: PageFences, wait_timeout_s: float) -> None:
        kinds = shape.layer_kinds
        # the model names its layers' kinds ("full", "swa", "mamba"); pools are Kinds
        self.window = (shape.sliding_window if Kind.SWA in device_pages and "swa" in kinds
                       else 0)
        self.mamba = Kind.MAMBA in device_pages and "mamba" in kinds
        h, d = shape.kv_heads_per_rank, shape.head_dim
        self.allocs: dict[Kind, PageAllocator] = {}
        self.pending: dict[Kind, list[int]] = {}
        if self.window:
            self.swa = DevicePool(kinds.count("swa"), device_pages[Kind.SWA], page_size, h, d,
                                  dtype, device)
        if self.mamba:
            self.state = torch.zeros(device_pages[Kind.MAMBA], kinds.count("mamba"),
                                     shape.hidden_size, dtype=dtype, device=device)
        for pool in STATE_POOLS:
            if pool in device_pages:
                self.allocs[pool] = PageAllocator(device_pages[pool], f"L1 {pool}",
                                                  wait_timeout_s)
                self.pending[pool] = []
        self.pools = {p: _DeferredPool(a, self.pending[p]) for p, a in self.allocs.items()}
        self.keeper = StateKeeper(self.pools, runtime_id, generation,  # type: ignore[arg-type]
                                  page_size, self.window, self.mamba, 0.0)
        self.fences = fences

    @property
    def active(self) -> bool:
        return self.keeper.active

    def advance(self, slot_id: int, s: RequestSlice, kv_pages: int, new: list[int],
                copy_in: int, fresh: bool) -> tuple[tuple[CacheExtentRef, ...], StateSpec]:
        """:meth:`StateKeeper.advance` and the slice's view of the pools: its SWA pages
        after it advanced, plus those it freed behind the window (before or as it
        allocated them), whose data its first queries still read (they are freed after
        the batch has run)."""
        row = self.keeper.rows[slot_id]
        before = list(row.swa)
        pool = self.pools.get(Kind.SWA)
        if pool is not None:
            pool.last = []
        exts, _ = self.keeper.advance(slot_id, s, kv_pages, new)
        fresh_swa = pool.last if pool is not None else []
        first = kv_pages - len(new)  # KV page index of the first new page
        swa = []
        for i, page in enumerate(row.swa):
            if page is None and i < len(before):
                page = before[i]
            elif page is None and first <= i < first + len(fresh_swa):
                page = fresh_swa[i - first]
            swa.append(-1 if page is None else page)
        copy_out = row.checkpoints[-1] if s.checkpoint and self.mamba else -1
        slot = row.slot if row.slot is not None else -1
        return exts, StateSpec(tuple(swa), slot, copy_in, fresh, copy_out)

    def use(self, specs: Sequence[StateSpec], event: LaneEvent) -> None:
        """The batch's compute reads and writes these pages and slots until ``event``."""
        self.fences.use(Tier.DEVICE, (p for s in specs for p in s.swa_pages if p >= 0),
                        event, Kind.SWA)
        self.fences.use(Tier.DEVICE, (x for s in specs for x in (s.slot, s.copy_in, s.copy_out)
                                      if x >= 0), event, Kind.MAMBA)

    def flush(self) -> None:
        """Free what prepare freed, once every op that uses it (this batch's compute
        included, :meth:`use` first) is done."""
        for pool, pages in self.pending.items():
            if pages:
                self.allocs[pool].free(list(pages),
                                       self.fences.fence(Tier.DEVICE, pages, pool))
                pages.clear()


class HybridIndex(BatchIndex):
    """BatchIndex plus, for SWA layers, each slice's window of keys (positions ``lo`` to
    its end, through its SWA pages) and, for MAMBA layers, its private slot."""

    def __init__(self, slices: Sequence[SliceSpec], states: Sequence[StateSpec],
                 page_size: int, window: int) -> None:
        super().__init__(slices, page_size)
        self.states = list(states)
        self.window = window
        if window:
            self._swa(slices, page_size, window)
        self.slots = torch.tensor([s.slot for s in states], dtype=torch.long)

    def _swa(self, slices: Sequence[SliceSpec], ps: int, w: int) -> None:
        b = len(slices)
        lows = [max(0, s.context - w + 1) for s in slices]
        tk = max(s.context + s.new - lo for s, lo in zip(slices, lows, strict=True))
        tq = max(s.new for s in slices)
        kv = torch.zeros(b, tk, dtype=torch.long)
        mask = torch.zeros(b, tq, tk, dtype=torch.bool)
        write = []
        for i, (s, st, lo) in enumerate(zip(slices, self.states, lows, strict=True)):
            end = s.context + s.new
            pos = torch.arange(lo, end)
            pages = torch.tensor(st.swa_pages, dtype=torch.long)[pos // ps]
            if bool((pages < 0).any()):
                raise ValueError(f"rid {s.rid}: the SWA window {lo}..{end} needs pages the "
                                 f"request does not hold")
            slots = pages * ps + pos % ps
            kv[i, : end - lo] = slots
            write.append(slots[s.context - lo:])
            q = torch.arange(s.context, s.context + s.new)[:, None]
            mask[i, : s.new, : end - lo] = (pos[None, :] <= q) & (pos[None, :] > q - w)
        mask[:, :, 0] |= ~mask.any(-1)  # padded queries see one key (no NaN); dropped
        self.swa_kv_slots, self.swa_mask = kv, mask[:, None]
        self.swa_write_slots = torch.cat(write)

    def to(self, device: torch.device | str) -> HybridIndex:
        super().to(device)
        for name in ("swa_kv_slots", "swa_mask", "swa_write_slots", "slots"):
            if hasattr(self, name):
                setattr(self, name, getattr(self, name).to(device, non_blocking=True))
        return self


class HybridModel(SyntheticModel):
    """Full, sliding-window and recurrent layers (the shape's ``layers``). A recurrent
    layer is a diagonal linear recurrence per hidden channel,
    ``s_t = a * s_{t-1} + x_t W_in``, output ``s_t W_out``, its state in the mamba pool."""

    def __init__(self, shape: ModelShape, device: str, dtype: torch.dtype, seed: int = 0
                 ) -> None:
        super().__init__(shape, device, dtype, seed)
        g = torch.Generator().manual_seed(seed + 1)
        hid = shape.hidden_size
        self.kinds = shape.layer_kinds
        self.ordinal = [self.kinds[:i].count(k) for i, k in enumerate(self.kinds)]
        self.decay = [torch.sigmoid(torch.randn(hid, generator=g) + 2).to(device, dtype)
                      for _ in self.kinds]
        def w() -> torch.Tensor:
            return (torch.randn(hid, hid, generator=g) / math.sqrt(hid)).to(device, dtype)

        self.w_in = [w() for _ in self.kinds]
        self.w_out = [w() for _ in self.kinds]

    def forward_hybrid(self, layer: int, x: torch.Tensor, idx: HybridIndex,
                       full: DevicePool, data: StateData) -> torch.Tensor:
        kind, n = self.kinds[layer], self.ordinal[layer]
        if kind == "full":
            return self._attention(layer, x, idx, full.k(n), full.v(n), idx.write_slots,
                                   idx)
        if kind == "swa":
            win = _Window(idx)
            return self._attention(layer, x, idx, data.swa.k(n), data.swa.v(n),
                                   idx.swa_write_slots, win)
        return self._recurrent(layer, n, x, idx, data)

    def _attention(self, layer: int, x: torch.Tensor, idx: BatchIndex, k: torch.Tensor,
                   v: torch.Tensor, write: torch.Tensor, keys: object) -> torch.Tensor:
        p, s = self.layers[layer], self.shape
        hq, hkv, d = s.heads_per_rank, s.kv_heads_per_rank, s.head_dim
        h = F.rms_norm(x, (x.shape[-1],))
        q = (h @ p["wq"]).view(-1, hq, d)
        kflat, vflat = k.view(-1, hkv, d), v.view(-1, hkv, d)
        kflat.index_copy_(0, write, (h @ p["wk"]).view(-1, hkv, d))
        vflat.index_copy_(0, write, (h @ p["wv"]).view(-1, hkv, d))
        attn = paged_attention(q, kflat, vflat, keys)  # type: ignore[arg-type]
        return self._mlp(layer, x + attn.reshape(-1, hq * d) @ p["wo"])

    def _recurrent(self, layer: int, n: int, x: torch.Tensor, idx: HybridIndex,
                   data: StateData) -> torch.Tensor:
        h = F.rms_norm(x, (x.shape[-1],))
        u = h @ self.w_in[layer]  # [T, hidden], rows in batch order
        b, tq = idx.q_rows.shape
        ur = u.index_select(0, idx.q_rows.reshape(-1)).view(b, tq, -1)
        valid = torch.zeros(b * tq, dtype=torch.bool, device=x.device)
        valid[idx.valid] = True
        valid = valid.view(b, tq)
        state = data.state[idx.slots, n]  # [b, hidden]
        a = self.decay[layer]
        out = torch.empty_like(ur)
        for t in range(tq):  # the recurrence: one step per token position
            step = valid[:, t:t + 1]
            state = torch.where(step, a * state + ur[:, t], state)
            out[:, t] = state
        data.state[idx.slots, n] = state
        y = out.reshape(b * tq, -1).index_select(0, idx.valid)
        return self._mlp(layer, x + y @ self.w_out[layer])

    def _mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        p = self.layers[layer]
        h = F.rms_norm(x, (x.shape[-1],))
        return x + F.silu(h @ p["w1"]) @ p["w2"]


class _Window:
    """The SWA layers' view of a HybridIndex for :func:`paged_attention`."""

    def __init__(self, idx: HybridIndex) -> None:
        self.q_rows, self.valid = idx.q_rows, idx.valid
        self.kv_slots, self.mask = idx.swa_kv_slots, idx.swa_mask


def copy_states(data: StateData, states: Sequence[StateSpec], before: bool) -> None:
    """Before layer 0: COW copies of attached checkpoints and zeroed fresh slots; after
    the last layer: checkpoints."""
    for st in states:
        if before and st.copy_in >= 0:
            data.state[st.slot] = data.state[st.copy_in]
        elif before and st.fresh and st.slot >= 0:
            data.state[st.slot].zero_()
        elif not before and st.copy_out >= 0:
            data.state[st.copy_out] = data.state[st.slot]
