"""The validation targets, checked from validate's output folders (PASS / FAIL / n/a).

GPU targets (from the validation issue; docs/VALIDATION.md explains them):
- ``step``: median |per-batch step-time error| <= 5 %; ``step_p90``: p90 <= 10 %;
- ``ttft``: median |per-request TTFT error| <= 10 %;
- ``hidden``: |predicted - measured load_hidden_fraction| <= 0.05 (5 points);
- ``copy_h2d`` / ``copy_d2h``: measured copies of >= 1 MiB (one timeline row each, over
  every folder) reach, at the median, >= 90 % of the profile's calibrated copy-engine
  bandwidth (``pcie.h2d_bytes_per_s`` / ``pcie.d2h_bytes_per_s``);
- ``layerwise_hidden``: in the folder named ``layerwise``, the loads of the batches whose
  mean compute time per layer exceeds their mean load time per layer are >= 90 % hidden
  behind compute (measured timeline).
CPU targets (every day, :data:`CPU`): step median |error| <= 15 %, TTFT per request median
|error| <= 20 %, decisions equal. Every error bound is two-sided through the absolute
value, and the signed median must also lie within it: a predictor of zero (error -1) or
of twice the time (+1) fails every one of them.
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


@dataclass(frozen=True)
class Targets:
    step: float  # median |step error|
    step_p90: float | None
    ttft: float  # median |TTFT error| per request
    hidden: float | None  # |hidden fraction difference|


GPU = Targets(step=0.05, step_p90=0.10, ttft=0.10, hidden=0.05)
CPU = Targets(step=0.15, step_p90=None, ttft=0.20, hidden=None)
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
        return f"{self.status:4} {self.name:16} {self.scope:16} {v:>8}  target {self.target}"


def _check(name: str, scope: str, value: float | None, target: str, ok: bool | None) -> Check:
    return Check(name, scope, value, target, None if value is None else ok)


def _bounded(stats: dict, key: str, bound: float) -> bool:
    """|stats[key]| <= bound and the signed median within it too (two-sided)."""
    v, bias = stats.get(key), stats.get("median_rel_error")
    return v is not None and abs(v) <= bound and (bias is None or abs(bias) <= bound)


def comparison_checks(scope: str, c: dict, t: Targets = GPU) -> list[Check]:
    """decisions, step, step_p90, ttft and hidden for one comparison.json record."""
    if not c:
        return [_check(n, scope, None, "", None) for n in ("step", "ttft")]
    if not c.get("scored", True):
        return [Check("decisions", scope, 0.0, "equal (else not scored)", False)]
    st = c.get("step_time", {})
    tt = c.get("ttft", {}).get("per_request", {})
    out = [Check("decisions", scope, 1.0, "equal", bool(c.get("decisions_equal")))]
    out.append(_check("step", scope, st.get("median_abs_rel_error"),
                      f"|err| <= {t.step:.0%}", _bounded(st, "median_abs_rel_error", t.step)))
    if t.step_p90 is not None:
        p90 = st.get("p90_abs_rel_error")
        out.append(_check("step_p90", scope, p90, f"p90 |err| <= {t.step_p90:.0%}",
                          p90 is not None and p90 <= t.step_p90))
    out.append(_check("ttft", scope, tt.get("median_abs_rel_error"),
                      f"per request |err| <= {t.ttft:.0%}",
                      _bounded(tt, "median_abs_rel_error", t.ttft)))
    if t.hidden is not None:
        d = c.get("load_hidden_fraction", {}).get("abs_diff")
        out.append(_check("hidden", scope, d, f"|pred-meas| <= {t.hidden:.2f}",
                          d is not None and d <= t.hidden))
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


def check_all(dest: Path, scenarios: list[str], t: Targets = GPU) -> list[Check]:
    """Every check over ``dest/<scenario>/`` folders written by ``hicache-lab validate``."""
    checks: list[Check] = []
    tls: dict[str, pd.DataFrame] = {}
    profile = None
    for s in scenarios:
        cj, tp = dest / s / "comparison.json", dest / s / "measured_timeline.parquet"
        c = json.loads(cj.read_text()) if cj.is_file() else {}
        profile = profile or c.get("profile")
        checks += comparison_checks(s, c, t)
        if tp.is_file():
            tls[s] = pd.read_parquet(tp)
    if t is GPU:
        checks += copy_checks(list(tls.values()), _profile_rates(profile))
        checks.append(layerwise_check(tls.get("layerwise")))
    return checks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cpu = "--cpu" in args
    args = [a for a in args if a != "--cpu"]
    if not args:
        print("usage: python -m validation.targets [--cpu] DEST [SCENARIO ...]",
              file=sys.stderr)
        return 2
    dest = Path(args[0])
    scenarios = args[1:] or sorted(p.name for p in dest.iterdir()
                                   if (p / "comparison.json").is_file())
    checks = check_all(dest, scenarios, CPU if cpu else GPU)
    print(f"targets ({'CPU' if cpu else 'GPU'}; issue): PASS / FAIL / n/a")
    for c in checks:
        print(c.line())
    n = {s: sum(c.status == s for c in checks) for s in ("PASS", "FAIL", "n/a")}
    print(f"targets: {n['PASS']} PASS, {n['FAIL']} FAIL, {n['n/a']} n/a")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
