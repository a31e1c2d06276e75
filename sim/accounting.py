"""What the simulated runtime counts of its own work, for reports, residual plots and
tests: batch shapes, bytes accounted from page counts, L3 bytes, what the folds did.

Invariant: counts only grow (a restart keeps them: they describe the whole run), and the
counters are the very objects the runtime exposes (``SimRuntime.batch_shapes``,
``bytes_accounted``, ``l3_bytes``, ``fold_counts``): mutated in place, never rebound.
``bytes_accounted`` is counted from page counts at prepare, independently of what the
link moves (``PcieLink.moved``): a test compares the two.
"""

from __future__ import annotations

from collections import Counter

from sim.batch import BatchShapes, BatchState


class Accounting:
    __slots__ = ("batch_shapes", "shapes", "bytes_accounted", "l3_bytes", "fold_counts")

    def __init__(self) -> None:
        self.batch_shapes = BatchShapes()
        self.shapes = self.batch_shapes.rows  # (record_shape)
        self.bytes_accounted = {"h2d": 0, "d2h": 0}
        self.l3_bytes = {"read": 0, "write": 0}
        # layer-wise chains fold into one event each (sim.chain_fold, sim.tail_fold);
        # what the folds did: tried, folded, interrupted, ... (instrumentation, tests)
        self.fold_counts: Counter[str] = Counter()

    def record_shape(self, st: BatchState, load_bytes: int) -> None:
        """:attr:`batch_shapes` of ``st``: its requests, tokens, context tokens and
        ``load_bytes`` (integer sums: any order gives the same)."""
        pre, dec = st.prefills, st.decodes
        n = len(dec)
        if pre:
            tokens, context = n, sum(dec)
            for new, ctx in pre:
                tokens += new
                context += ctx
            self.shapes[st.plan.batch_id] = (len(pre) + n, tokens, context, load_bytes)
        else:
            self.shapes[st.plan.batch_id] = (n, n, sum(dec), load_bytes)
