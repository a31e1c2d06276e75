"""A synthetic transformer whose attention really reads the paged KV pool.

Per layer, for a batch of request slices: RMS-norm, Q/K/V projections, the new tokens'
K and V written into the requests' pages, attention over each request's whole KV
gathered page by page through its request-to-token row (restored pages included), an
output projection and a SiLU MLP. Weights are random (seeded ``torch.Generator``);
inputs are a deterministic embedding of (rid, position), so two runs that hold the same
KV produce the same outputs. Invariant: outputs depend on page *contents*, never on
which page ids hold them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gpu_backend.pools import DevicePool
from gpu_backend.shapes import ModelShape

VOCAB = 1024


@dataclass(frozen=True, slots=True)
class SliceSpec:
    """One request's work: KV before (``context``), tokens now (``new``), its pages."""

    rid: int
    context: int
    new: int
    pages: tuple[int, ...]


class BatchIndex:
    """Index tensors for one batch, built vectorized on the host; moved with :meth:`to`.

    Rows of the batch's hidden state are the slices' new tokens in slice order. The
    attention mask (``[b, 1, max new, max total]``, the batch's padded shape) is built on
    the device the index lives on, when first used: on a GPU that is a few kernels
    instead of megabytes of host work and a pageable copy per batch."""

    def __init__(self, slices: Sequence[SliceSpec], page_size: int) -> None:
        b = len(slices)
        ctx = torch.tensor([s.context for s in slices], dtype=torch.long)
        new = torch.tensor([s.new for s in slices], dtype=torch.long)
        total = ctx + new
        tq, tk = int(new.max()), int(total.max())
        kv_slots = torch.zeros(b, tk, dtype=torch.long)
        write = []
        offs = torch.arange(page_size, dtype=torch.long)
        for i, s in enumerate(slices):
            n = int(total[i])
            if len(s.pages) * page_size < n:
                raise ValueError(f"rid {s.rid}: {len(s.pages)} pages for {n} tokens")
            pages = torch.tensor(s.pages, dtype=torch.long)
            slots = (pages[:, None] * page_size + offs[None, :]).reshape(-1)[:n]
            kv_slots[i, :n] = slots
            write.append(slots[s.context:])
        j = torch.arange(tq)
        qpos = ctx[:, None] + j[None, :]  # [b, tq]
        qvalid = j[None, :] < new[:, None]
        ends = torch.cumsum(new, 0)
        self.num_tokens = int(ends[-1])
        self.max_total = tk
        self.rids = [s.rid for s in slices]
        self.last_rows = ends - 1
        self.write_slots = torch.cat(write)
        self.q_rows = torch.where(qvalid, (ends - new)[:, None] + j[None, :], 0)
        self.kv_slots = kv_slots
        self.qpos, self.qvalid = qpos, qvalid
        self.valid = (torch.arange(b)[:, None] * tq + j[None, :])[qvalid]
        rid = torch.tensor(self.rids, dtype=torch.long)[:, None]
        self.token_ids = ((rid * 7919 + qpos) % VOCAB)[qvalid]
        self._mask: torch.Tensor | None = None

    @property
    def mask(self) -> torch.Tensor:
        """``[b, 1, tq, tk]``: query at position p sees keys 0..p; padded queries see key 0
        (no NaN; their rows are dropped)."""
        if self._mask is None:
            keys = torch.arange(self.max_total, device=self.qpos.device)
            m = keys[None, None, :] <= self.qpos[:, :, None]
            m &= self.qvalid[:, :, None]
            m[:, :, 0] |= ~self.qvalid
            self._mask = m[:, None]
        return self._mask

    def to(self, device: torch.device | str) -> BatchIndex:
        for name in ("last_rows", "write_slots", "q_rows", "kv_slots", "qpos", "qvalid",
                     "valid", "token_ids"):
            setattr(self, name, getattr(self, name).to(device, non_blocking=True))
        self._mask = None
        return self


class SyntheticModel:
    """Random weights with the shape's per-rank dimensions, built on ``device`` (a seeded
    generator there: a GPU builds Llama-3-8B's weights in well under a second, where CPU
    ``randn`` plus a copy took minutes). The LM head has ``shape.vocab_size`` rows."""

    def __init__(self, shape: ModelShape, device: str, dtype: torch.dtype, seed: int = 0) -> None:
        self.shape, self.device, self.dtype = shape, device, dtype
        g = torch.Generator(device=device).manual_seed(seed)
        hq, hkv, d = shape.heads_per_rank, shape.kv_heads_per_rank, shape.head_dim
        hid, ffn = shape.hidden_size, shape.ffn_per_rank

        def w(n_in: int, n_out: int) -> torch.Tensor:
            t = torch.randn(n_in, n_out, generator=g, device=device, dtype=dtype)
            return t.mul_(1.0 / math.sqrt(n_in))

        self.embed = w(VOCAB, hid) * math.sqrt(VOCAB)
        self.layers = [
            {"wq": w(hid, hq * d), "wk": w(hid, hkv * d), "wv": w(hid, hkv * d),
             "wo": w(hq * d, hid), "w1": w(hid, ffn), "w2": w(ffn, hid)}
            for _ in range(shape.num_layers)
        ]
        self.lm_head = w(hid, shape.vocab_per_rank) if shape.vocab_size else None

    def embed_tokens(self, idx: BatchIndex) -> torch.Tensor:
        return self.embed.index_select(0, idx.token_ids)

    def forward_layer(self, layer: int, x: torch.Tensor, idx: BatchIndex,
                      pool: DevicePool) -> torch.Tensor:
        """Write the new K/V of ``layer`` into the pool, attend over the paged KV, MLP."""
        p = self.layers[layer]
        s = self.shape
        hq, hkv, d = s.heads_per_rank, s.kv_heads_per_rank, s.head_dim
        h = F.rms_norm(x, (x.shape[-1],))
        q = (h @ p["wq"]).view(-1, hq, d)
        kflat = pool.k(layer).view(-1, hkv, d)
        vflat = pool.v(layer).view(-1, hkv, d)
        kflat.index_copy_(0, idx.write_slots, (h @ p["wk"]).view(-1, hkv, d))
        vflat.index_copy_(0, idx.write_slots, (h @ p["wv"]).view(-1, hkv, d))
        attn = paged_attention(q, kflat, vflat, idx)
        x = x + attn.reshape(-1, hq * d) @ p["wo"]
        h = F.rms_norm(x, (x.shape[-1],))
        return x + F.silu(h @ p["w1"]) @ p["w2"]

    def sample(self, x: torch.Tensor, idx: BatchIndex) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's last op: final norm of each request's last row, LM head, greedy
        sampling. Returns (last hidden rows, next token ids), one per request."""
        last = x.index_select(0, idx.last_rows)
        if self.lm_head is None:  # a shape without a vocabulary: no LM head to run
            return last, torch.zeros(len(idx.rids), dtype=torch.long, device=x.device)
        logits = F.rms_norm(last, (last.shape[-1],)) @ self.lm_head
        return last, logits.argmax(dim=-1)


def paged_attention(q: torch.Tensor, kflat: torch.Tensor, vflat: torch.Tensor,
                    idx: BatchIndex) -> torch.Tensor:
    """Causal GQA attention of each request's new queries over its paged KV.

    ``q``: [T, Hq, D] (rows in batch order); ``kflat``/``vflat``: [slots, Hkv, D] pool views.
    Returns [T, Hq, D]."""
    b, tq = idx.q_rows.shape
    hq, hkv = q.shape[1], kflat.shape[1]
    qp = q.index_select(0, idx.q_rows.reshape(-1)).view(b, tq, hq, -1).transpose(1, 2)
    slots = idx.kv_slots.reshape(-1)
    k = kflat.index_select(0, slots).view(b, -1, hkv, kflat.shape[-1]).transpose(1, 2)
    v = vflat.index_select(0, slots).view(b, -1, hkv, vflat.shape[-1]).transpose(1, 2)
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    out = F.scaled_dot_product_attention(qp, k, v, attn_mask=idx.mask)  # [B, Hq, Tq, D]
    out = out.transpose(1, 2).reshape(b * tq, hq, -1)
    return out.index_select(0, idx.valid)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        positions: Sequence[int]) -> torch.Tensor:
    """Plain float64 softmax attention for one request: ``q`` [Tq, Hq, D] at ``positions``
    over contiguous ``k``/``v`` [Tk, Hkv, D]; query at position p sees keys 0..p."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    out = torch.empty_like(q)
    for i, pos in enumerate(positions):
        scores = torch.einsum("hd,thd->ht", q[i], k[: pos + 1]) / math.sqrt(q.shape[-1])
        out[i] = torch.einsum("ht,thd->hd", scores.softmax(-1), v[: pos + 1])
    return out
