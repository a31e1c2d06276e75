"""Guard simulated results in CI: compare a run's summaries with a committed baseline.

    hicache-lab run scenarios/quick.yaml --write-baseline scenarios/baselines/quick.json
    hicache-lab run scenarios/quick.yaml --baseline scenarios/baselines/quick.json  # exit 1
                                                                             # on drift

The simulator is deterministic for a (scenario, seed), so drift means a model, policy or
scheduler change: intended changes rewrite the baseline in the same commit. A metric
drifts when |new - old| > rel * |old| + abs (defaults 1% and 1e-9).

File format: ``{"scenario": NAME, "variants": {VARIANT: {METRIC: value}}}``; a baseline
for another scenario is refused. (A bare ``{VARIANT: {...}}`` from before baselines named
their scenario is still read.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

GUARDED = ["hit_rate", "device_hit_rate", "host_hit_rate", "l3_hit_rate", "ttft_mean_s",
           "ttft_p50_s", "ttft_p90_s", "itl_p50_s", "request_throughput_rps",
           "effective_input_throughput_tps", "load_hidden_fraction",
           "h2d_bytes", "d2h_bytes", "sim_time_s"]


def _value(v: object) -> float | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)  # type: ignore[arg-type]


def write_baseline(summaries: dict[str, dict], path: Path, *, scenario: str) -> None:
    data = {"scenario": scenario,
            "variants": {name: {m: _value(s.get(m)) for m in GUARDED}
                         for name, s in summaries.items()}}
    from hicache.report.outputs import OutputFile

    OutputFile(path, overwrite=True, flag="--write-baseline").write_text(
        json.dumps(data, indent=2, sort_keys=True) + "\n")  # whole, or the old one


def read_baseline(path: Path, scenario: str | None = None) -> dict[str, dict]:
    """``{variant: {metric: value}}``; ValueError for a malformed file or a baseline that
    names another scenario."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a baseline file: {e}") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the baseline ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a baseline file (expected a JSON object)")
    if "variants" not in data:  # the format before baselines named their scenario
        return data
    named = data.get("scenario")
    if scenario is not None and named is not None and named != scenario:
        raise ValueError(f"{path}: a baseline of scenario {named!r}, not of {scenario!r}")
    return data["variants"]


def check_baseline(summaries: dict[str, dict], path: Path, *, scenario: str | None = None,
                   rel: float = 0.01, abs_tol: float = 1e-9) -> list[str]:
    """Drift messages, one per (variant, metric) out of tolerance; [] when all match."""
    base = read_baseline(path, scenario)
    out = []
    for name in sorted(set(base) | set(summaries)):
        if name not in summaries:
            out.append(f"{name}: in the baseline but not run")
            continue
        if name not in base:
            out.append(f"{name}: run but not in the baseline")
            continue
        for metric, old in base[name].items():
            new = _value(summaries[name].get(metric))
            if old is None or new is None:
                if (old is None) != (new is None):
                    out.append(f"{name}: {metric}: {old} -> {new}")
                continue
            if abs(new - old) > rel * abs(old) + abs_tol:
                change = (new - old) / old if old else math.inf
                out.append(f"{name}: {metric}: {old:.6g} -> {new:.6g} ({change:+.2%})")
    return out
