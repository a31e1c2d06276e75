"""The GPU validation targets, checked from validate's output folders (PASS / FAIL / n/a).

Targets (from the validation issue; docs/VALIDATION.md explains them):
- ``step``: median |per-batch step-time error| <= 5 % (comparison.json step_time);
- ``ttft_p50`` / ``ttft_p90``: |TTFT percentile error| <= 10 %;
- ``hidden``: |predicted - measured load_hidden_fraction| <= 0.05 (5 points);
- ``copy_h2d`` / ``copy_d2h``: measured copies of >= 1 MiB (one timeline row each, over
  every folder) reach, at the median, >= 90 % of the profile's calibrated copy-engine
  bandwidth (``pcie.h2d_bytes_per_s`` / ``pcie.d2h_bytes_per_s``);
- ``layerwise_hidden``: in the folder named ``layerwise``, the loads of the batches whose
  mean compute time per layer exceeds their mean load time per layer are >= 90 % hidden
  behind compute (measured timeline).
A check is ``n/a`` when its inputs are absent (no loads, no >= 1 MiB copies, no batch
where compute outweighs loads). Invariant: every check is computed from the written files
only, never raises on missing data, and ``ok`` is ``None`` exactly when the status is n/a.

    python -m validation.targets DEST [SCENARIO ...]   (prints one line per check)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hicache.report.metrics import timeline_metrics

STEP_MAX, TTFT_MAX, HIDDEN_POINTS = 0.05, 0.10, 0.05
COPY_MIN_BYTES, COPY_MIN_FRACTION, LAYERWISE_MIN_HIDDEN = 1 << 20, 0.90, 0.90


@dataclass(frozen=True)
class Check:
    name: str
    scope: str  # scenario folder, or "all"
    value: float | None
    target: str
    ok: bool | None  # None: n/a

    @property
    def status(self) -> str:
        return "n/a" if self.ok is None else ("PASS" if self.ok else "FAIL")

    def line(self) -> str:
        v = "-" if self.value is None else f"{self.value:+.3f}"
        return f"{self.status:4} {self.name:16} {self.scope:15} {v:>8}  target {self.target}"


def _check(name: str, scope: str, value: float | None, target: str, ok: bool | None) -> Check:
    return Check(name, scope, value, target, None if value is None else ok)


def comparison_checks(scope: str, c: dict) -> list[Check]:
    """step, ttft_p50, ttft_p90 and hidden for one comparison.json record."""
    step = c.get("step_time", {}).get("median_abs_rel_error")
    out = [_check("step", scope, step, f"|err| <= {STEP_MAX:.0%}",
                  step is not None and step <= STEP_MAX)]
    for q in ("p50", "p90"):
        e = c.get("ttft", {}).get(q, {}).get("rel_error")
        out.append(_check(f"ttft_{q}", scope, e, f"|err| <= {TTFT_MAX:.0%}",
                          e is not None and abs(e) <= TTFT_MAX))
    lh = c.get("load_hidden_fraction", {})
    p, m = lh.get("predicted"), lh.get("measured")
    d = None if p is None or m is None else p - m
    out.append(_check("hidden", scope, d, f"|pred-meas| <= {HIDDEN_POINTS:.2f}",
                      d is not None and abs(d) <= HIDDEN_POINTS))
    return out


def copy_checks(timelines: list[pd.DataFrame], rates: dict[str, float]) -> list[Check]:
    """Median achieved rate of >= 1 MiB copy rows over the calibrated rate, per direction."""
    tl = pd.concat(timelines, ignore_index=True) if timelines else pd.DataFrame()
    out = []
    for lane in ("h2d", "d2h"):
        frac = None
        if len(tl) and lane in rates:
            rows = tl[(tl["lane"] == lane) & (tl["bytes"] >= COPY_MIN_BYTES)
                      & (tl["end"] > tl["start"])]
            if len(rows):
                rate = rows["bytes"] / (rows["end"] - rows["start"])
                frac = float(rate.median()) / rates[lane]
        out.append(_check(f"copy_{lane}", "all", frac,
                          f">= {COPY_MIN_FRACTION:.0%} of calibrated (rows >= 1 MiB)",
                          frac is not None and frac >= COPY_MIN_FRACTION))
    return out


def layerwise_check(tl: pd.DataFrame | None, scope: str = "layerwise") -> Check:
    """Measured hidden fraction of the loads of compute-heavy batches (per layer)."""
    frac = None
    if tl is not None and len(tl):
        comp = tl[(tl["lane"] == "compute") & (tl["layer"] >= 0)]
        loads = tl[(tl["lane"] == "h2d") & (tl["op"] == "load") & (tl["layer"] >= 0)]
        per_c = (comp["end"] - comp["start"]).groupby(comp["batch"]).mean()
        per_l = (loads["end"] - loads["start"]).groupby(loads["batch"]).mean()
        both = pd.concat([per_c.rename("c"), per_l.rename("l")], axis=1, join="inner")
        heavy = set(both.index[both["c"] > both["l"]])
        if heavy:
            keep = (tl["lane"] == "compute") | (
                (tl["lane"] == "h2d") & (tl["op"] == "load") & tl["batch"].isin(heavy))
            frac = timeline_metrics(tl[keep].reset_index(drop=True))["load_hidden_fraction"]
    return _check("layerwise_hidden", scope, frac,
                  f">= {LAYERWISE_MIN_HIDDEN:.0%} when compute/layer > load/layer",
                  frac is not None and frac >= LAYERWISE_MIN_HIDDEN)


def _profile_rates(path: str | None) -> dict[str, float]:
    if not path or not Path(path).is_file():
        return {}
    from sim.hardware.profile import load_profile

    p = load_profile(path).pcie
    return {"h2d": p.h2d_bytes_per_s, "d2h": p.d2h_bytes_per_s}


def check_all(dest: Path, scenarios: list[str]) -> list[Check]:
    """Every check over ``dest/<scenario>/`` folders written by ``hicache-lab validate``."""
    checks: list[Check] = []
    tls: dict[str, pd.DataFrame] = {}
    profile = None
    for s in scenarios:
        cj, tp = dest / s / "comparison.json", dest / s / "measured_timeline.parquet"
        c = json.loads(cj.read_text()) if cj.is_file() else {}
        profile = profile or c.get("profile")
        checks += comparison_checks(s, c)
        if tp.is_file():
            tls[s] = pd.read_parquet(tp)
    checks += copy_checks(list(tls.values()), _profile_rates(profile))
    checks.append(layerwise_check(tls.get("layerwise")))
    return checks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m validation.targets DEST [SCENARIO ...]", file=sys.stderr)
        return 2
    dest = Path(args[0])
    scenarios = args[1:] or sorted(p.name for p in dest.iterdir()
                                   if (p / "comparison.json").is_file())
    checks = check_all(dest, scenarios)
    print("targets (GPU; issue): PASS / FAIL / n/a")
    for c in checks:
        print(c.line())
    n = {s: sum(c.status == s for c in checks) for s in ("PASS", "FAIL", "n/a")}
    print(f"targets: {n['PASS']} PASS, {n['FAIL']} FAIL, {n['n/a']} n/a")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
