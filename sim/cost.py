"""Compute cost model: the time one layer of a batch takes, separate from the engine.

Analytic (default): a roofline per layer,
    t = max(flops / (bf16_flops * matmul_efficiency), bytes / hbm_bytes_per_s) + kernel_launch_s
where flops = 2 * tokens * linear params (per rank) + 4 * heads * head_dim * attended pairs,
bytes = weights (once per batch) + KV read and written + activations + mamba state.
A new token at sequence position p attends to p keys (full), min(p, window) keys (swa) or
none (mamba: linear in tokens, plus reading and writing the recurrent state per request).
One launch cost per layer is charged (CUDA-graph-like; per-kernel launches are not).

Calibrated: when the profile has ``calibrated.prefill_layer`` and ``decode_layer`` tables,
a layer takes interp(prefill_layer, prefill tokens in the batch) + interp(decode_layer,
decode requests in the batch), the same for every layer kind (context length is not in the
tables). Interpolation is piecewise linear in log-log space; beyond the table ends the end
segment's log-log slope extrapolates (a single point scales proportionally).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from sim.hardware.model import KINDS, ModelPreset
from sim.hardware.profile import HardwareProfile, Table


def attended_pairs(new_tokens: int, context_tokens: int, window: int | None) -> float:
    """Sum over the new tokens of the keys each attends to (``window`` None: unbounded)."""
    n, c = new_tokens, context_tokens
    if window is None:
        return n * c + n * (n + 1) / 2
    below = min(n, max(0, window - c))  # tokens whose position is still inside the window
    return below * c + below * (below + 1) / 2 + (n - below) * window


def interp_loglog(table: Table, x: float) -> float:
    """Piecewise-linear interpolation of ``table`` in log-log space (see module doc)."""
    if x <= 0:
        return 0.0
    if len(table) == 1:
        x0, y0 = table[0]
        return y0 * x / x0
    xs = [p[0] for p in table]
    i = min(max(bisect.bisect_left(xs, x), 1), len(table) - 1)
    (x0, y0), (x1, y1) = table[i - 1], table[i]
    if y0 <= 0 or y1 <= 0:  # log undefined: fall back to linear on this segment
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    slope = (math.log(y1) - math.log(y0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + slope * (math.log(x) - math.log(x0)))


class CostModel:
    """Per-layer compute times for a (profile, model) pair. Stateless after construction."""

    def __init__(self, profile: HardwareProfile, model: ModelPreset) -> None:
        self.profile, self.model = profile, model
        gpu = profile.gpu
        self.flops_per_s = gpu.bf16_flops * gpu.matmul_efficiency
        self.hbm = gpu.hbm_bytes_per_s
        self.launch = gpu.kernel_launch_s
        self.params = {k: model.linear_params_per_layer(k) for k in KINDS}
        self.kv_token = {k: model.kv_bytes_per_token_per_layer(k) for k in KINDS}
        self.attn_flops_per_pair = 4.0 * model.heads_per_rank * model.head_dim
        self.act_bytes_per_token = 2.0 * model.hidden_size * model.dtype_bytes
        cal = profile.calibrated
        self.tables = (cal.prefill_layer, cal.decode_layer) if (
            cal is not None and cal.prefill_layer and cal.decode_layer) else None

    def _window(self, kind: str) -> int | None:
        return self.model.sliding_window if kind == "swa" else None

    def _work(self, kind: str, prefills: Sequence[tuple[int, int]],
              decodes: Sequence[int]) -> tuple[float, float]:
        """(flops, bytes) of one layer of ``kind`` for prefill (new, context) chunks and
        decode contexts."""
        tokens = sum(n for n, _ in prefills) + len(decodes)
        flops = 2.0 * tokens * self.params[kind]
        nbytes = self.params[kind] * self.model.dtype_bytes + tokens * self.act_bytes_per_token
        if kind == "mamba":
            nbytes += 2.0 * self.model.mamba_state_bytes * (len(prefills) + len(decodes))
            return flops, nbytes
        window, kv = self._window(kind), self.kv_token[kind]
        pairs = 0.0
        keys = 0
        for n, c in prefills:
            pairs += attended_pairs(n, c, window)
            keys += (c + n if window is None else min(c + n, window)) + n
        for c in decodes:
            pairs += c + 1 if window is None else min(c + 1, window)
            keys += (c + 1 if window is None else min(c + 1, window)) + 1
        return flops + self.attn_flops_per_pair * pairs, nbytes + keys * kv

    def layer_time(self, kind: str, prefills: Sequence[tuple[int, int]] = (),
                   decodes: Sequence[int] = ()) -> float:
        """Seconds for one layer of ``kind`` over a (possibly mixed) batch."""
        if not prefills and not decodes:
            return 0.0
        if self.tables is not None:
            pre, dec = self.tables
            prefill_tokens = sum(n for n, _ in prefills)
            return interp_loglog(pre, prefill_tokens) + interp_loglog(dec, len(decodes))
        flops, nbytes = self._work(kind, prefills, decodes)
        return max(flops / self.flops_per_s, nbytes / self.hbm) + self.launch

    def prefill_layer_time(self, new_tokens: int, context_tokens: int,
                           kind: str = "full") -> float:
        return self.layer_time(kind, prefills=((new_tokens, context_tokens),))

    def decode_layer_time(self, contexts: Sequence[int], kind: str = "full") -> float:
        return self.layer_time(kind, decodes=contexts)

    def batch_layer_times(self, prefills: Sequence[tuple[int, int]],
                          decodes: Sequence[int]) -> tuple[float, ...]:
        """Per-layer times of a batch in layer order (each kind computed once)."""
        per_kind = {k: self.layer_time(k, prefills, decodes)
                    for k in set(self.model.layer_kinds)}
        return tuple(per_kind[k] for k in self.model.layer_kinds)
