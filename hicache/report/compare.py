"""Side-by-side comparison of run summaries (:func:`hicache.report.metrics.summarize`).

Invariant: one row per variant (in the given order), one float column per requested metric;
an undefined value (None or absent from that summary) is NaN and prints as ``-``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hicache.report.metrics import metric_label


def comparison_table(summaries: dict[str, dict], metrics: list[str]) -> pd.DataFrame:
    """Variants x metrics. Raises KeyError for a metric that no summary defines (a typo)."""
    unknown = [m for m in metrics if summaries and not any(m in s for s in summaries.values())]
    if unknown:
        raise KeyError(f"no summary has metrics {unknown}")
    data = {
        m: [np.nan if s.get(m) is None else float(s[m]) for s in summaries.values()]
        for m in metrics
    }
    df = pd.DataFrame(data, index=pd.Index(list(summaries), name="variant"), dtype=np.float64)
    return df.reindex(columns=list(metrics))


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3e}"
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


def format_table(df: pd.DataFrame, *, units: bool = True) -> str:
    """Plain-text table: index left-aligned, values right-aligned, header with units."""
    head = [df.index.name or ""] + [metric_label(c) if units else str(c) for c in df.columns]
    rows = [[str(i)] + [_fmt(v) for v in r] for i, r in zip(df.index, df.itertuples(index=False),
                                                            strict=True)]  # fmt: skip
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), sep, *(line(r) for r in rows)])


def format_comparison(df: pd.DataFrame, *, width: int = 100) -> str:
    """Variants x metrics as text at most ``width`` columns wide: transposed (one line per
    metric, with its unit; one column per variant), the variants split into blocks when
    they do not fit side by side."""
    names = [str(i) for i in df.index]
    labels = [metric_label(c) for c in df.columns]
    cells = {n: [_fmt(v) for v in row] for n, row in zip(names, df.itertuples(index=False),
                                                        strict=True)}  # fmt: skip
    first = max([len("metric"), *map(len, labels)])
    col = {n: max(len(n), *(len(c) for c in cells[n])) if labels else len(n) for n in names}
    blocks: list[list[str]] = [[]]
    used = first
    for n in names:
        if blocks[-1] and used + 2 + col[n] > width:
            blocks.append([])
            used = first
        blocks[-1].append(n)
        used += 2 + col[n]
    out = []
    for block in blocks:
        if out:
            out.append("")
        out.append("  ".join(["metric".ljust(first), *(n.rjust(col[n]) for n in block)]))
        out.append("  ".join(["-" * first, *("-" * col[n] for n in block)]))
        for i, label in enumerate(labels):
            out.append("  ".join([label.ljust(first),
                                  *(cells[n][i].rjust(col[n]) for n in block)]).rstrip())
    return "\n".join(out)
