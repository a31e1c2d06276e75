"""``results/seed_study/README.md`` from the study's numbers: one table per study with the
published figure beside ours, the sweeps that explain the differences, and the plots.

Every number in the file comes from the runs (``collect``'s results); the prose around the
numbers states what was assumed, never what the runs should have shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from sim.seed_study import plots
from sim.seed_study.analysis import relative_gap
from sim.seed_study.runner import sweep_args
from sim.seed_study.spec import (
    MULTITURN,
    SESSIONS,
    SWEEPS,
    WAIT,
    MultiturnStudy,
    Sweep,
    moved_by,
)

GAP = 0.20  # differences above this need a measured explanation (issue 13)


def _f(v: Any, fmt: str = "{:.3g}") -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "n/a"
    return fmt.format(v)


def _pct(v: Any) -> str:
    return _f(v, "{:.0%}")


def _gap(ours: Any, published: Any) -> str:
    g = relative_gap(ours, published)
    return "n/a" if g is None else f"{g:.0%}" + (" **>20%**" if g > GAP else "")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _range_gap(ours: int | None, lo: float, hi: float, how: str) -> str:
    """Distance from the published range ``lo..hi``, relative to its nearer end."""
    if ours is None:
        return "n/a"
    g = 0.0 if lo <= ours <= hi else (lo - ours) / lo if ours < lo else (ours - hi) / hi
    return f"{g:.0%} ({how})" + (" **>20%**" if g > GAP else "")


def _beside(ours: float | None, published: float, fmt: str) -> list[str]:
    """``[ours formatted, its gap to published]``."""
    return [_f(ours, fmt), _gap(ours, published)]


def _below(ours: float | None, limit: float) -> list[str]:
    return [_f(ours, "{:.2f}"), "within" if (ours or 1e9) < limit else "**outside**"]


def _multiturn_rows(st: MultiturnStudy, m: dict, x: dict) -> list[list[str]]:
    """quantity | published | ours (seed's flags) | gap | ours, wait_complete | gap | what
    moves it."""
    p, l3, w = st.published, m["L1+L2+L3"], m.get(WAIT, {})
    why = {k: moved_by(v) for k, v in st.moved_by.items()}
    lo, hi = p["cliff"]
    none = ["", ""]
    rows = [
        ["L1 cliff: round the hit rate stays < 10% (onset: < 90% of its peak)",
         f"{lo}-{hi} (both curves ~0)",
         f"{_f(m['L1']['cliff_round'], '{}')} (onset {_f(m['L1']['onset_round'], '{}')})",
         _range_gap(m["L1"]["cliff_round"], lo, hi, "predicted"), *none, why["cliff"]],
        ["L1+L2 cliff (onset)", f"{lo}-{hi}",
         f"{_f(m['L1+L2']['cliff_round'], '{}')} (onset {_f(m['L1+L2']['onset_round'], '{}')})",
         _range_gap(m["L1+L2"]["onset_round"], lo, hi, "onset, calibrated"), *none,
         why["cliff"]],
        ["L1+L2+L3 hit rate, last 5 rounds", _pct(p["late_hit_l3"]),
         *_beside(l3["late_hit_rate"], p["late_hit_l3"], "{:.0%}"),
         *(_beside(w["late_hit_rate"], p["late_hit_l3"], "{:.0%}") if w else none),
         why["late_hit_l3"]],
        ["effective input throughput, L1+L2+L3 / L1 [x]", f"{p['x_l3']:.1f}",
         *_beside(x["L1+L2+L3"], p["x_l3"], "{:.1f}"),
         *(_beside(x[WAIT], p["x_l3"], "{:.1f}") if w else none), why["x_l3"]],
        ["effective input throughput, L1+L2 / L1 [x]", f"{p['x_l2']:.1f}",
         *_beside(x["L1+L2"], p["x_l2"], "{:.1f}"), *none, why["x_l2"]],
    ]
    if "ttft_l3_max_s" in p:
        limit = p["ttft_l3_max_s"]
        rows.append(["mean TTFT, L1+L2+L3 [s]", f"< {limit:.0f}",
                     *_below(l3["ttft_mean_s"], limit),
                     *(_below(w["ttft_mean_s"], limit) if w else none), why["ttft"]])
    if "ttft_l3_s" in p:
        rows += [
            ["mean TTFT, L1+L2+L3 [s]", f"{p['ttft_l3_s']:.2f}",
             *_beside(l3["ttft_mean_s"], p["ttft_l3_s"], "{:.2f}"),
             *(_beside(w["ttft_mean_s"], p["ttft_l3_s"], "{:.2f}") if w else none),
             why["ttft"]],
            ["effective input throughput, L1+L2+L3 [tok/s]", f"{p['tps_l3']:,.0f}",
             *_beside(l3["input_tps"], p["tps_l3"], "{:,.0f}"),
             *(_beside(w["input_tps"], p["tps_l3"], "{:,.0f}") if w else none),
             why["tps"]],
            ["effective input throughput, L1 [tok/s]", f"{p['tps_l1']:,.0f}",
             *_beside(m["L1"]["input_tps"], p["tps_l1"], "{:,.0f}"), *none, why["tps"]]]
    return rows


def multiturn_section(res: dict, out: Path) -> str:
    parts = []
    for st in MULTITURN:
        r = res["multiturn"].get(st.key)
        if r is None:
            continue
        m, x = r["metrics"], r["x"]
        lo, hi = st.published["cliff"]
        plots.multiturn(r["rounds"], (lo, hi), st.title, out / f"multiturn_{st.key}.png")
        rows = _multiturn_rows(st, m, x)
        tiers = _table(["tier", "hit rate", "device / host / L3", "mean TTFT [s]",
                        "eff. input [tok/s]", "cliff (onset)"],
                       [[v, _pct(mm["hit_rate"]),
                         " / ".join(_pct(mm[k]) for k in ("device_hit_rate", "host_hit_rate",
                                                          "l3_hit_rate")),
                         _f(mm["ttft_mean_s"], "{:.2f}"), _f(mm["input_tps"], "{:,.0f}"),
                         f"{_f(mm['cliff_round'], '{}')} ({_f(mm['onset_round'], '{}')})"]
                        for v, mm in m.items()])
        parts.append(f"### {st.title} (`{st.scenario}`)\n\n"
                     + _table(["quantity", "published", "ours (seed's flags)", "gap",
                               "ours, wait_complete", "gap", "what moves it"], rows)
                     + f"\n\nPer tier over the whole run:\n\n{tiers}\n\n"
                     f"![{st.key}](multiturn_{st.key}.png)\n")
    return "\n".join(parts)


def session_section(res: dict, out: Path) -> str:
    df: pd.DataFrame = res["session"]
    if df is None or not len(df):
        return "(not run)\n"
    published = {st.title: {b: f["ttft_change_pct"] for b, f in st.published.items()}
                 for st in SESSIONS}
    plots.session(df, published, out / "session_aware.png")
    rows = []
    for st in SESSIONS:
        for _, r in df[df["model"] == st.title].sort_values("batch").iterrows():
            pub = st.published.get(int(r["batch"]), {})
            dev = (f"{_pct(pub['device_lru'])} -> {_pct(pub['device_session'])}"
                   if "device_lru" in pub else "")
            devh = (f"{_pct(pub['device_host_lru'])} -> {_pct(pub['device_host_session'])}"
                    if "device_host_lru" in pub else "")
            rows.append([
                st.title, str(int(r["batch"])),
                f"{pub['ttft_change_pct']:+.1f}%" if pub else "",
                f"{r['ttft_change_pct']:+.1f}%",
                _gap(r["ttft_change_pct"], pub["ttft_change_pct"]) if pub else "",
                f"{r['ttft_lru_s']:.2f} / "
                f"{r['ttft_session_s']:.2f}", dev,
                f"{_pct(r['device_lru'])} -> {_pct(r['device_session'])}", devh,
                f"{_pct(r['device_host_lru'])} -> {_pct(r['device_host_session'])}"])
    moves = "\n".join(f"- {st.title}: assumptions swept: {moved_by(st.moved_by)} (section 4 "
                      "says which differences they move, and which they do not)"
                      for st in SESSIONS)
    return (_table(["model", "batch", "TTFT published", "TTFT ours", "gap",
                    "mean TTFT LRU / session [s]", "device hit published", "device hit ours",
                    "device+host published", "device+host ours"], rows)
            + f"\n\n{moves}\n\n![session-aware](session_aware.png)\n")


def sweep_section(res: dict, out: Path) -> str:
    parts = []
    for i, sw in enumerate(SWEEPS, start=1):
        df = res["sweeps"].get(sw.key)
        if df is None:
            continue
        key, *more = (k for k, _ in sw.grid)
        metrics = _sweep_metrics(sw)
        lines = df.assign(variant=df["variant"].str.cat(  # a line per variant and more keys
            [f"{k}=" + df[k].astype(str) for k in more], sep=" ")) if more else df
        plots.sweep_lines(lines, key, metrics, sw.question, out / f"sweep_{sw.key}.png",
                          xlabel=key)
        cols = [key, *more, "variant", *metrics]
        rows = [[_f(r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols]
                for _, r in df.iterrows()]
        parts.append(f"### 3.{i} {sw.question}\n\n`hicache-lab {' '.join(sweep_args(sw))} "
                     f"--out results/seed_study/sweeps/{sw.key}`\n\n{_table(cols, rows)}\n\n"
                     f"{res['readings'].get(sw.key, '')}\n\n![{sw.key}](sweep_{sw.key}.png)\n")
    return "\n".join(parts)


def _sweep_metrics(sw: Sweep) -> list[str]:
    if sw.key in ("dsv4_growth", "dsv4_ratio", "inkling_l1"):
        return ["cliff_round", "hit_rate", "effective_input_throughput_tps"]
    if sw.key in ("pro_l1", "pro_tool_time", "pro_swa", "pro_reasoning", "qwen_l1",
                  "qwen_mamba", "qwen_coverage"):
        return ["ttft_mean_s", "device_hit_rate", "hit_rate"]
    return ["hit_rate", "l3_hit_rate", "ttft_mean_s", "effective_input_throughput_tps"]


def render(res: dict, out: Path, intro: str, discussion: str) -> Path:
    """Write the plots and ``out/README.md``; ``intro`` and ``discussion`` are the text
    around the tables (:mod:`sim.seed_study.text`)."""
    out.mkdir(parents=True, exist_ok=True)
    text = (intro + "\n## 1. Multi-turn: the cliff, and what L2 and L3 buy\n\n"
            + multiturn_section(res, out)
            + "\n## 2. Session-aware eviction on SWE-bench-shaped agent sessions\n\n"
            + session_section(res, out)
            + "\n## 3. What moves each difference: sweeps of the assumptions\n\n"
            + sweep_section(res, out) + "\n" + discussion)
    path = out / "README.md"
    path.write_text(text)
    return path
