"""Compute cost model: the time one layer of a batch takes, the LM head with sampling, and
the host work a batch costs the driver thread, separate from the engine.

Analytic (datasheet profiles): a roofline per layer,
    t = max(flops / (bf16_flops * matmul_efficiency), bytes / hbm_bytes_per_s) + kernel_launch_s
where flops = 2 * tokens * linear params (per rank) + 4 * heads * head_dim * attended pairs,
bytes = weights (once per batch) + KV read and written + activations + mamba state.
A new token at sequence position p attends to p keys (full), min(p, window) keys (swa) or
none (mamba: linear in tokens, plus reading and writing the recurrent state per request).
The LM head is one more roofline (2 * requests * hidden * vocab/tp flops, its weights read
once). Host work is not modelled (0) unless the profile measures it. Weights read: with
``model.moe``, the shared experts and the routed experts the batch's tokens touch
(:meth:`hicache.modelspec.ModelSpec.weight_bytes_per_layer`). Compressed-KV layers
(``model.compression``, DeepSeek-V4) attend their window and compressed entries, and CSA
layers pay their indexer (:mod:`sim.attention_work`). With tensor parallelism and a
profile ``interconnect``, each layer waits for two all-reduces of its tokens' hidden
states (after attention and after the FFN), in series with its compute.

Calibrated (``calibrated.compute``): least-squares parametric rooflines
(:mod:`sim.fit`) fitted to the measured grid, per phase (prefill, decode)::

    layer(batch) = c0 + c1 * max(size, knee) + c2 * keys + c3 * pairs

size = new tokens (prefill) or requests (decode); keys and pairs are the attention's work
under the mechanism the runtime used: ``padded`` (the torch runtime: dense over the batch's
longest request, keys = requests x longest total, pairs = requests x longest new x longest
total) or ``ragged`` (FlashAttention-style kernels: sums of each request's own). Why a
fitted model rather than 2-D tables: docs/VALIDATION.md. The embedding (added to layer 0),
LM head with sampling, batch setup and prepare_batch are linear fits of their own grids.

In situ (``calibrated.in_situ``, :mod:`gpu_backend.calib_insitu`): the serving loop's ops
run colder than the microbenchmarks; layers scale by ``compute_scale``, layer 0 gains
``first_op_s``, sampling scales by ``sample_scale``, batch setup gains ``setup_s``.

Ablation (``profile.ablate``): ``context`` drops keys and pairs, ``knee`` the knee,
``lm_head`` the LM head, ``embed`` the embedding time, ``in_situ`` the in-situ terms; the
host lane's switches live in :mod:`sim.host`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from sim.attention_work import allreduce_time, compressed_work
from sim.fit import LinearFit, fit_knee, fit_linear
from sim.hardware.model import KINDS, ModelPreset
from sim.hardware.profile import HardwareProfile, Table

Batch = tuple[Sequence[tuple[int, int]], Sequence[int]]  # (prefill (new, ctx)), decode ctxs

# decode_works' chunks (folded decode steps of one batch, sim.fold): from SUM_STEPS steps on
# numpy adds each step's layer times (np.add.reduce over the layers: a column a step, the
# rows added in order), and from VECTOR_STEPS on it also computes the steps' layer times
# (fewer: sum() or the plain loop per step costs less than numpy's calls: instructions
# per chunk of the trace's 3,000 requests, numpy ~31k + 0.22k a step, sum() ~3.3k a step),
# when sum() adds floats one after another (Python 3.12's sum compensates)
SUM_STEPS = 10  # >= 2
VECTOR_STEPS = 24
_SEQUENTIAL_SUM = sum([1.0, 1e100, 1.0, -1e100]) == 0.0


def attended_pairs(new_tokens: int, context_tokens: int, window: int | None) -> float:
    """Sum over the new tokens of the keys each attends to (``window`` None: unbounded)."""
    n, c = new_tokens, context_tokens
    if window is None:
        return n * c + n * (n + 1) / 2
    below = min(n, max(0, window - c))  # tokens whose position is still inside the window
    return below * c + below * (below + 1) / 2 + (n - below) * window


def interp_loglog(table: Table, x: float) -> float:
    """Piecewise-linear interpolation of ``table`` in log-log space; beyond the ends the
    end segment's slope extrapolates (a single point scales proportionally)."""
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


def attention_work(prefills: Sequence[tuple[int, int]], decodes: Sequence[int],
                   mechanism: str) -> tuple[float, float]:
    """(keys read, query-key pairs) of one layer's attention over the batch."""
    reqs = [(n, c) for n, c in prefills] + [(1, c) for c in decodes]
    if not reqs:
        return 0.0, 0.0
    if mechanism == "padded":
        b, tq, tk = len(reqs), max(n for n, _ in reqs), max(n + c for n, c in reqs)
        return float(b * tk), float(b * tq * tk)
    return (float(sum(n + c for n, c in reqs)),
            float(sum(attended_pairs(n, c, None) for n, c in reqs)))


PREFILL_FEATURES = ("1", "tokens", "keys", "pairs")
DECODE_FEATURES = ("1", "requests", "keys")


class FittedCompute:
    """The calibrated per-layer model (module doc), one fit per phase."""

    def __init__(self, grid: dict, ablate: frozenset[str]) -> None:
        self.mechanism = grid["attention"]
        self.context = "context" not in ablate
        fit = fit_linear if "knee" in ablate else fit_knee
        pre = [(self.features(((int(n), int(c)),) * int(b), ()), t)
               for b, n, c, t in grid["prefill"]]
        dec = [(self.features((), (int(c),) * int(b)), t) for b, _, c, t in grid["decode"]]
        self.prefill = self._fit(fit, PREFILL_FEATURES, pre)
        self.decode = self._fit(fit, DECODE_FEATURES, dec)

    def _fit(self, fit, names: tuple[str, ...], pts: list) -> LinearFit:  # noqa: ANN001
        k = len(names) if self.context else 2
        return fit(names[:k], [f[:k] for f, _ in pts], [t for _, t in pts])

    def features(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]
                 ) -> list[float]:
        keys, pairs = attention_work(prefills, decodes, self.mechanism)
        if prefills:
            return [1.0, float(sum(n for n, _ in prefills) + len(decodes)), keys, pairs]
        return [1.0, float(len(decodes)), keys]

    def __call__(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> float:
        f = self.features(prefills, decodes)
        model = self.prefill if prefills else self.decode
        return model(f[:len(model.coef)])


def _line(points: Sequence[Sequence[float]], names: tuple[str, ...]) -> LinearFit | None:
    """A non-negative linear fit of rows ``[*x, seconds]`` on features ``[1, *x]``."""
    if not points:
        return None
    return fit_linear(names, [[1.0, *p[:-1]] for p in points], [p[-1] for p in points])


def floats(column: list[float] | np.ndarray) -> list[float]:
    """A column of :meth:`CostModel.decode_work_column` as Python floats."""
    return column if isinstance(column, list) else column.tolist()


class CostModel:
    """Per-layer compute, LM head and host times for a (profile, model) pair. Stateless
    after construction but for memos of pure functions (decode terms, sample times)."""

    def __init__(self, profile: HardwareProfile, model: ModelPreset) -> None:
        self.profile, self.model = profile, model
        self.ablate = profile.ablate
        gpu = profile.gpu
        self.flops_per_s = gpu.bf16_flops * gpu.matmul_efficiency
        self.hbm = gpu.hbm_bytes_per_s
        self.launch = gpu.kernel_launch_s
        self.params = {k: model.linear_params_per_layer(k) for k in KINDS}
        self.kv_token = {k: model.kv_bytes_per_token_per_layer(k) for k in KINDS}
        self.attn_flops_per_pair = 4.0 * model.heads_per_rank * model.head_dim
        self.act_bytes_per_token = 2.0 * model.hidden_size * model.dtype_bytes
        self._classes = model.layer_classes  # per layer (the model is frozen)
        self._distinct = tuple(dict.fromkeys(self._classes))  # each class once
        self._class_layer = {c: i for i, c in reversed(list(enumerate(self._classes)))}
        cal = profile.calibrated
        self.tables = (cal.prefill_layer, cal.decode_layer) if (
            cal is not None and cal.prefill_layer and cal.decode_layer) else None
        self.fitted = None
        self.embed_fit = self.sample_fit = self.setup_fit = self.prepare_fit = None
        ins = cal.in_situ if cal is not None and "in_situ" not in self.ablate else None
        self.in_situ = ins or {"compute_scale": 1.0, "first_op_s": 0.0, "sample_scale": 1.0,
                               "setup_s": 0.0}
        if cal is not None and cal.compute:
            c = cal.compute
            self.fitted = FittedCompute(c, self.ablate)
            self.embed_fit = _line(c.get("embed", ()), ("1", "tokens"))
            self.sample_fit = _line(c.get("sample", ()), ("1", "requests"))
        if cal is not None and cal.host:
            h = cal.host
            self.setup_fit = _line([[b, b * n, b * (n + c), t] for b, n, c, t in h["setup"]],
                                   ("1", "requests", "tokens", "keys"))
            self.prepare_fit = _line([[b, b * t, s] for b, t, s in h["prepare"]],
                                     ("1", "requests", "tokens"))
        # decode-only layers take _decode_layer (analytic, no compressed KV), whose terms
        # per (kind, batch size) are kept here, and sample_time's answers per size
        self._plain_decode = (self.fitted is None and self.tables is None
                              and model.compression is None)
        self._decode_terms: dict[tuple[str, int], tuple[float, float, float, float]] = {}
        self._samples: dict[int, float] = {}
        self._works_terms: dict[int, tuple[list[str], list[tuple[str, float, float, float]],
                                           float, float]] = {}  # decode_works', per size

    def _window(self, kind: str) -> int | None:
        return self.model.sliding_window if kind == "swa" else None

    def _fixed(self, kind: str, tokens: int, requests: int) -> tuple[float, float]:
        """(flops, bytes) of one layer of ``kind`` that no context changes: the weights
        and activations of ``tokens``, and a recurrent layer's state of ``requests``."""
        flops = 2.0 * tokens * self.params[kind]
        nbytes = (self.model.weight_bytes_per_layer(kind, tokens)
                  + tokens * self.act_bytes_per_token)
        if kind == "mamba":
            nbytes += 2.0 * self.model.mamba_state_bytes * requests
        return flops, nbytes

    def _work(self, kind: str, prefills: Sequence[tuple[int, int]],
              decodes: Sequence[int], ratio: int = 1) -> tuple[float, float]:
        """(flops, bytes) of one layer of ``kind`` (compression ``ratio`` when the model
        has compressed KV) for prefill (new, context) chunks and decode contexts."""
        m = self.model
        tokens = sum(n for n, _ in prefills) + len(decodes)
        flops, nbytes = self._fixed(kind, tokens, len(prefills) + len(decodes))
        if kind == "mamba":
            return flops, nbytes
        if m.compression is not None:
            layer = self._class_layer[(kind, ratio)]
            pairs, index_flops, read = compressed_work(
                m.compression, layer, m.sliding_window, m.tensor_parallel, prefills, decodes)
            written = tokens * m.compression.entry_bytes  # window entries of the new tokens
            return (flops + self.attn_flops_per_pair * pairs + index_flops,
                    nbytes + read + written)
        window, kv = self._window(kind), self.kv_token[kind]
        pairs = 0.0
        keys = 0
        for n, c in prefills:
            pairs += attended_pairs(n, c, window)
            keys += (c + n if window is None else min(c + n, window)) + n
        if window is None:  # the loop below: sums of integers, exact in floats in any order
            total = sum(decodes)
            pairs += total + len(decodes)
            keys += total + 2 * len(decodes)
        else:
            for c in decodes:
                pairs += min(c + 1, window)
                keys += min(c + 1, window) + 1
        return flops + self.attn_flops_per_pair * pairs, nbytes + keys * kv

    def layer_time(self, kind: str, prefills: Sequence[tuple[int, int]] = (),
                   decodes: Sequence[int] = (), ratio: int = 1) -> float:
        """Seconds for one layer of ``kind`` (and compression ``ratio``, see
        ``ModelSpec.layer_classes``) over a (possibly mixed) batch."""
        if not prefills:
            if not decodes:
                return 0.0
            if self._plain_decode:
                return self._decode_layer(kind, decodes)
        if self.fitted is not None:
            return self.fitted(prefills, decodes) * self.in_situ["compute_scale"]
        if self.tables is not None:
            pre, dec = self.tables
            prefill_tokens = sum(n for n, _ in prefills)
            return interp_loglog(pre, prefill_tokens) + interp_loglog(dec, len(decodes))
        flops, nbytes = self._work(kind, prefills, decodes, ratio)
        tokens = sum(n for n, _ in prefills) + len(decodes)
        return (max(flops / self.flops_per_s, nbytes / self.hbm) + self.launch
                + self.allreduce_s(tokens))

    def _decode_layer(self, kind: str, decodes: Sequence[int]) -> float:
        """:meth:`layer_time` of a decode-only batch under the analytic model (no fits, no
        tables, no compressed KV): the same float operations as :meth:`_work` and the
        roofline, with the terms that depend on the batch size alone (flops, weight and
        activation bytes, all-reduce) computed once per (kind, size). Layers with a window
        or a recurrent state take :meth:`_work` itself."""
        n = len(decodes)
        terms = self._decode_terms.get((kind, n))
        if terms is None:
            if kind == "mamba" or self._window(kind) is not None:
                flops, nbytes = self._work(kind, (), decodes)
                return (max(flops / self.flops_per_s, nbytes / self.hbm) + self.launch
                        + self.allreduce_s(n))
            terms = self._decode_terms[(kind, n)] = (
                *self._fixed(kind, n, n), self.kv_token[kind], self.allreduce_s(n))
        flops, nbytes, kv, allreduce = terms
        total = sum(decodes)
        pairs = 0.0 + (total + n)  # _work: pairs = 0.0, then += total + n
        flops = flops + self.attn_flops_per_pair * pairs
        nbytes = nbytes + (total + 2 * n) * kv  # keys = 0, then += total + 2 * n
        return max(flops / self.flops_per_s, nbytes / self.hbm) + self.launch + allreduce

    def allreduce_s(self, tokens: int) -> float:
        """The tensor-parallel all-reduces of one layer (0 without tp or interconnect)."""
        link, tp = self.profile.interconnect, self.model.tensor_parallel
        if link is None or tp <= 1:
            return 0.0
        nbytes = tokens * self.model.hidden_size * self.model.dtype_bytes
        return 2.0 * allreduce_time(nbytes, tp, link.allreduce_bytes_per_s, link.latency_s)

    def prefill_layer_time(self, new_tokens: int, context_tokens: int,
                           kind: str = "full") -> float:
        return self.layer_time(kind, prefills=((new_tokens, context_tokens),))

    def decode_layer_time(self, contexts: Sequence[int], kind: str = "full") -> float:
        return self.layer_time(kind, decodes=contexts)

    def batch_layer_times(self, prefills: Sequence[tuple[int, int]],
                          decodes: Sequence[int]) -> tuple[float, ...]:
        """Per-layer times of a batch in layer order (each layer class computed once);
        the embedding is charged to layer 0."""
        classes = self._classes
        if len(self._distinct) == 1:  # one class: every layer costs the same
            kind, ratio = self._distinct[0]
            times = [self.layer_time(kind, prefills, decodes, ratio)] * len(classes)
        else:
            per_class = {c: self.layer_time(c[0], prefills, decodes, c[1])
                         for c in self._distinct}
            times = [per_class[c] for c in classes]
        times[0] += self.embed_time(prefills, decodes) + self.in_situ["first_op_s"]
        return tuple(times)

    def decode_works(self, contexts: Sequence[int], steps: int, first: int = 0
                     ) -> list[float]:
        """Compute seconds of decode steps ``first .. first + steps - 1`` of one batch
        (step k: every request k tokens further, contexts ``c + k``), each bit for bit
        ``sum(batch_layer_times((), [c + k for c in contexts]))``: a folded decode run
        (sim.fold). The analytic model needs only the contexts' sums per step (its
        attention terms are sums of integers, exact in floats): O(steps), not
        O(steps x requests). Compressed KV (its indexer's top-k) takes the exact path."""
        return floats(self.decode_work_column(contexts, steps, first))

    def decode_work_column(self, contexts: Sequence[int], steps: int, first: int = 0
                           ) -> list[float] | np.ndarray:
        """:meth:`decode_works`' floats, as numpy's float64 column where numpy adds the
        layer times (a caller that goes on in numpy converts nothing), else as a list."""
        if (self.fitted is not None or self.tables is not None or not contexts
                or self.model.compression is not None):
            return [sum(self.batch_layer_times((), [c + k for c in contexts]))
                    for k in range(first, first + steps)]
        n = len(contexts)
        fixed = self._works_terms.get(n)
        if fixed is None:
            fixed = self._works_terms[n] = self._works_fixed(n)
        kinds, terms, head, allreduce = fixed
        layer_kinds = self.model.layer_kinds
        uniform = len(kinds) == 1
        flops_per_s, hbm, launch, per_pair = self.flops_per_s, self.hbm, self.launch, \
            self.attn_flops_per_pair
        out = []
        if kinds == ["full"]:  # the loop below for its common case, one kind: the same floats
            _, flops, nbytes, kv = terms[0]
            rest = len(layer_kinds) - 1
            # sum of (c + k + 1) at step k = first (integers: the loop's below[-1] exactly)
            pairs = sum(contexts) + first * n + n
            ts: list[float] | np.ndarray
            # memory-bound throughout (decode, the usual case): max(a, b) is b at every
            # step when the last step's a is at most the first step's b, as a and b only
            # grow from step to step (products by non-negative constants, sums, quotients
            # by positive ones: rounding keeps their order); then no a is computed
            bound = (per_pair >= 0 and kv >= 0 and flops_per_s > 0 and hbm > 0
                     and (flops + per_pair * float(pairs + (steps - 1) * n)) / flops_per_s
                     <= (nbytes + (pairs + n) * kv) / hbm)
            if (steps >= VECTOR_STEPS and _SEQUENTIAL_SUM  # integers exact in both
                    and (pairs + steps * n) * max(1, abs(kv)) + abs(nbytes) < 2 ** 53):
                # the loop below, element by element, all steps at once (x * y and x + y
                # as y * x and y + x: the same floats)
                if bound and type(kv) is int:  # keys x kv: integers, exact (above)
                    ts = np.arange((pairs + n) * kv, (pairs + n + steps * n) * kv, n * kv,
                                   dtype=np.int64) + nbytes
                    ts /= hbm
                else:
                    p = np.arange(pairs, pairs + steps * n, n, dtype=np.int64)
                    ts = per_pair * p
                    ts += flops
                    ts /= flops_per_s
                    b = (p + n) * kv + nbytes
                    b /= hbm
                    np.maximum(ts, b, out=ts)  # max(a, b): neither is NaN nor -0.0
                ts += launch
                if allreduce:  # t + 0.0 is t (t >= 0.0, never -0.0)
                    ts += allreduce
            elif bound:  # the loop below without a
                keys = pairs + n
                ts = [(nbytes + k * kv) / hbm + launch + allreduce
                      for k in range(keys, keys + steps * n, n)]
            else:
                ts = []
                add_t = ts.append
                for _ in range(steps):
                    a = (flops + per_pair * float(pairs)) / flops_per_s
                    b = (nbytes + (pairs + n) * kv) / hbm
                    add_t((b if b > a else a) + launch + allreduce)  # max(a, b), as max picks
                    pairs += n
            if steps < SUM_STEPS or not _SEQUENTIAL_SUM:
                # sum adds in order from its start (or as the compute op's sum does)
                return [sum([t] * rest, t + head) for t in ts]
            # the same additions, step by step, all steps at once: a column a step, its
            # first row sum's start, then one row a layer added in order (a reduction over
            # the rows of a C-ordered array of 2 or more columns adds row after row; over
            # a lone column numpy would add pairwise: SUM_STEPS >= 2)
            times = np.empty((rest + 1, steps))
            times[:] = ts
            if head:  # t + 0.0 is t (as above)
                times[0] += head
            return np.add.reduce(times, axis=0)
        window = self.model.sliding_window if "swa" in kinds else None
        ordered = sorted(contexts)
        below = [0]  # below[i]: sum of the i smallest contexts
        for c in ordered:
            below.append(below[-1] + c)
        for k in range(first, first + steps):
            per_kind = {}
            for kind, flops, nbytes, kv in terms:
                if kind == "full":
                    pairs = below[-1] + k * n + n  # sum of (c + k + 1)
                elif kind == "swa":  # sum of min(c + k + 1, window)
                    short = bisect.bisect_left(ordered, window - k - 1)
                    pairs = below[short] + short * (k + 1) + (n - short) * window
                if kind != "mamba":
                    flops += per_pair * float(pairs)
                    nbytes += (pairs + n) * kv
                per_kind[kind] = max(flops / flops_per_s, nbytes / hbm) + launch + allreduce
            if uniform:
                times = [per_kind[kinds[0]]] * len(layer_kinds)
            else:
                times = [per_kind[kind] for kind in layer_kinds]
            times[0] += head
            out.append(sum(times))
        return out

    def _works_fixed(self, n: int) -> tuple[list[str], list[tuple[str, float, float, float]],
                                            float, float]:
        """:meth:`decode_works`' terms for a batch of ``n`` that no context changes (kept
        per ``n``, as ``_decode_terms``): the layer kinds, sorted, with each one's
        (kind, flops, bytes, KV bytes per token) of :meth:`_fixed`; the embedding and
        first-op time charged to layer 0; one layer's all-reduce."""
        kinds = sorted(set(self.model.layer_kinds))
        terms = [(kind, *self._fixed(kind, n, n), self.kv_token[kind]) for kind in kinds]
        head = self.embed_time((), [0] * n) + self.in_situ["first_op_s"]
        return kinds, terms, head, self.allreduce_s(n)

    def batch_layer_interpreter(self, prefills: Sequence[tuple[int, int]],
                                decodes: Sequence[int]) -> tuple[float, ...]:
        """Per layer, the part of :meth:`batch_layer_times` that is per-op overhead rather
        than work (the fits' constants, the in-situ cold start): on the CPU runtime the
        interpreter time that needs the GIL (:mod:`sim.interpreter`); 0 without fits."""
        if self.fitted is None or not (prefills or decodes):
            return (0.0,) * len(self.model.layer_kinds)
        model = self.fitted.prefill if prefills else self.fitted.decode
        per = model.coef[0] * self.in_situ["compute_scale"]
        first = per + self.in_situ["first_op_s"]
        if self.embed_fit is not None and "embed" not in self.ablate:
            first += self.embed_fit.coef[0]
        return (first, *(per,) * (len(self.model.layer_kinds) - 1))

    def sample_interpreter(self, requests: int) -> float:
        """The per-op part of :meth:`sample_time` (as :meth:`batch_layer_interpreter`)."""
        if self.sample_fit is None or requests <= 0 or "lm_head" in self.ablate:
            return 0.0
        return self.sample_fit.coef[0] * self.in_situ["sample_scale"]

    def embed_time(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> float:
        if self.embed_fit is None or "embed" in self.ablate:
            return 0.0
        return self.embed_fit([1.0, sum(n for n, _ in prefills) + len(decodes)])

    def sample_time(self, requests: int) -> float:
        """LM head over each request's last row, then sampling (0 without a vocabulary):
        :meth:`_sample_time`, kept per ``requests`` (a pure function of it)."""
        t = self._samples.get(requests)
        if t is None:
            t = self._samples[requests] = self._sample_time(requests)
        return t

    def _sample_time(self, requests: int) -> float:
        if requests <= 0 or "lm_head" in self.ablate:
            return 0.0
        if self.sample_fit is not None:
            return self.sample_fit([1.0, requests]) * self.in_situ["sample_scale"]
        vocab = self.model.vocab_size / self.model.tensor_parallel
        if not vocab:
            return 0.0
        h = self.model.hidden_size
        flops = 2.0 * requests * h * vocab
        nbytes = (h * vocab + requests * (h + vocab)) * self.model.dtype_bytes
        return max(flops / self.flops_per_s, nbytes / self.hbm) + self.launch

    def setup_time(self, prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> float:
        """Host time to build the batch's index and move it to the device."""
        if self.setup_fit is None:
            return 0.0
        reqs = [(n, c) for n, c in prefills] + [(1, c) for c in decodes]
        b = len(reqs)
        tk = max((n + c for n, c in reqs), default=0)
        return self.setup_fit([1.0, b, sum(n for n, _ in reqs), b * tk]) + self.in_situ["setup_s"]

    def prepare_time(self, requests: int, tokens: int = 0) -> float:
        """Host time of prepare_batch's own bookkeeping for ``requests`` slices of
        ``tokens`` new tokens in all (copy issue is separate)."""
        if self.prepare_fit is None:
            return 0.0
        return self.prepare_fit([1.0, requests, tokens])
