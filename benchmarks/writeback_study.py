"""Can D2H write-back proceed without hurting decode ITL? A study in the simulator.

Run: ``python benchmarks/writeback_study.py [--json] [--out results/writeback]``
(about a minute; writes table.md, table.csv, tradeoff.png and summary.json there).

Scenario: ``scenarios/writeback_study.yaml`` (decode-heavy, write_through, kernel copies).
Runs its three variants (no throttle, static 2 GB/s, adaptive 2%), then a sweep of the
static rate and of the adaptive target; then the same three policies under a write-heavy
load (4k-token prompts, 256-token answers, 8 requests/s: backups beside most decode
steps). For each it reports:

- ITL per token, p50 and p99: for every decode step, the time since the previous decode
  step ended (so prefill batches in between count, as a user sees them), once per request
  in the step;
- decode step time, p50 and p99, once per request in the step: what a backup copying
  beside a step can slow (prefill batches in between do not count here);
- backup lag, p50, p99 and max: per batch with backups (cache-only plans included), from
  its completion to the end of its last backup copy (timeline rows), i.e. how long an L2
  copy lags L1;
- the adaptive policy's learned interference (decode slowdown per unit of chunk overlap)
  and duty cycle.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hicache.scenario import load_scenario  # noqa: E402
from sim.driver import simulate  # noqa: E402

STATIC_RATES = (1e9, 2e9, 5e9, 10e9, 20e9)
ADAPTIVE_TARGETS = (0.005, 0.01, 0.02, 0.04)
WRITE_HEAVY = ["workload.request_length=4096", "workload.output_length=256",
               "workload.request_rate=8", "cache.device_tokens=600000"]


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(np.searchsorted(cum, q), len(values) - 1)])


def token_gaps(steps: list[tuple[float, float, int]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gap, duration, requests) per decode step: the time since the previous decode step
    ended, the step's own duration, and how many requests it decoded."""
    gaps, durations, weights, prev = [], [], [], None
    for start, end, batch in sorted(steps, key=lambda s: s[1]):
        if batch <= 0:
            continue
        if prev is not None:
            gaps.append(end - prev)
            durations.append(end - start)
            weights.append(batch)
        prev = end
    return np.array(gaps), np.array(durations), np.array(weights, dtype=float)


def backup_lags(timeline: Any, batch_ends: dict[int, float]) -> np.ndarray:
    """Per batch with backups: its last backup copy's end less its completion."""
    backup: dict[int, float] = {}
    for row in timeline.rows:
        if row.lane == "d2h" and row.op == "backup":
            backup[row.batch] = max(backup.get(row.batch, 0.0), row.end)
    return np.array([end - batch_ends[b] for b, end in backup.items()])


def measure(name: str, scenario: Any) -> dict[str, Any]:
    res = simulate(scenario, name=name)
    if res.unfinished:
        raise RuntimeError(f"{name}: {len(res.unfinished)} requests did not finish")
    rt = res.replicas[0].runtime
    gaps, durations, w = token_gaps(rt.writeback.steps)
    lags = backup_lags(rt.timeline, rt.writeback.ends)
    ttft = np.array([r["ttft"] for r in res.records])
    wb = scenario.run.writeback
    return {"variant": name, "policy": wb.policy,
            "knob": (wb.rate_bytes_per_s if wb.policy == "static" else
                     wb.target_slowdown if wb.policy == "adaptive" else None),
            "itl_p50_ms": 1e3 * weighted_quantile(gaps, w, 0.5),
            "itl_p99_ms": 1e3 * weighted_quantile(gaps, w, 0.99),
            "step_p50_ms": 1e3 * weighted_quantile(durations, w, 0.5),
            "step_p99_ms": 1e3 * weighted_quantile(durations, w, 0.99),
            "lag_p50_ms": 1e3 * float(np.median(lags)),
            "lag_p99_ms": 1e3 * float(np.quantile(lags, 0.99)),
            "lag_max_ms": 1e3 * float(lags.max()),
            "ttft_p50_s": float(np.median(ttft)),
            "hit_rate": sum(r["cached_tokens"] for r in res.records)
            / sum(r["prompt_tokens"] for r in res.records),
            **{f"policy_{k}": v for k, v in rt.writeback.policy.describe().items()}}


LOADS = {"decode-heavy": [], "write-heavy": WRITE_HEAVY}


def run(path: Path) -> list[dict[str, Any]]:
    """Every policy and knob of the sweep under both loads."""
    sc = load_scenario(path)
    rows = []
    for load, overrides in LOADS.items():
        base = sc.variant("no throttle").with_overrides(overrides) if overrides else \
            sc.variant("no throttle")
        runs = [(name, s.with_overrides(overrides) if overrides else s)
                for name, s in sc.expand()]
        runs += [(f"static {rate / 1e9:g} GB/s", base.with_overrides(
            ["run.writeback.policy=static", f"run.writeback.rate_bytes_per_s={rate}"]))
            for rate in STATIC_RATES]
        runs += [(f"adaptive {target:.1%}", base.with_overrides(
            ["run.writeback.policy=adaptive", f"run.writeback.target_slowdown={target}"]))
            for target in ADAPTIVE_TARGETS]
        rows += [{"load": load, **measure(name, s)} for name, s in runs]
    return rows


COLUMNS = ("load", "variant", "itl_p50_ms", "itl_p99_ms", "step_p50_ms", "step_p99_ms",
           "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "ttft_p50_s", "hit_rate")


def table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(
        str(r[c]) if isinstance(r[c], str) else f"{r[c]:.4g}" for c in COLUMNS) + " |\n"
        for r in rows)
    return head + body


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LOADS), figsize=(12, 4.5), sharey=True)
    for ax, load in zip(axes, LOADS, strict=True):
        mine = [r for r in rows if r["load"] == load]
        none = next(r for r in mine if r["policy"] == "none")

        def rel(r: dict[str, Any], none: dict[str, Any] = none) -> float:
            return 100.0 * (r["step_p50_ms"] / none["step_p50_ms"] - 1.0)

        for policy, marker in (("static", "s"), ("adaptive", "o")):
            pts = sorted((r["lag_p99_ms"], rel(r), r["variant"]) for r in mine
                         if r["policy"] == policy and " " in r["variant"])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=policy)
            for x, y, label in pts:
                ax.annotate(label.split(" ", 1)[1], (x, y), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.scatter([none["lag_p99_ms"]], [0.0], color="k", zorder=3, label="no throttle")
        ax.axhline(0.0, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_ylim(-9, 3)
        ax.set_xlabel("backup lag p99 (ms, log)")
        ax.set_ylabel("decode step p50 vs no throttle (%)")
        ax.set_title(f"{load} (no throttle: {none['step_p50_ms']:.1f} ms)")
        ax.legend(fontsize=8)
    fig.suptitle("write-back policies (llama-3-8b, H100, write_through, kernel copies)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "writeback_study.yaml"))
    ap.add_argument("--out", default=str(ROOT / "results" / "writeback"))
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    args = ap.parse_args()
    rows = run(Path(args.scenario))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table(rows))
    with (out / "table.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    plot(rows, out / "tradeoff.png")
    if args.json:
        print(json.dumps({"rows": rows}))
    else:
        print(table(rows))
        print(f"-> {out}")


if __name__ == "__main__":
    main()
