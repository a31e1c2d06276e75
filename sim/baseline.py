"""Guard simulated results in CI: compare a run's summaries with a committed baseline.

    hicache-lab run scenarios/quick.yaml --write-baseline scenarios/baselines/quick.json
    hicache-lab run scenarios/quick.yaml --baseline scenarios/baselines/quick.json  # exit 1
                                                                             # on drift

The simulator is deterministic for a (scenario, seed), so drift means a model, policy or
scheduler change: intended changes rewrite the baseline in the same commit. A metric
drifts when |new - old| > rel * |old| + abs (defaults 1% and 1e-9).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

GUARDED = ["hit_rate", "device_hit_rate", "host_hit_rate", "l3_hit_rate", "ttft_mean_s",
           "ttft_p50_s", "ttft_p90_s", "itl_p50_s", "request_throughput_rps",
           "effective_input_throughput_tps", "gpu_busy_fraction", "load_hidden_fraction",
           "h2d_bytes", "d2h_bytes", "sim_time_s"]


def _value(v: object) -> float | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)  # type: ignore[arg-type]


def write_baseline(summaries: dict[str, dict], path: Path) -> None:
    data = {name: {m: _value(s.get(m)) for m in GUARDED} for name, s in summaries.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def check_baseline(summaries: dict[str, dict], path: Path, *, rel: float = 0.01,
                   abs_tol: float = 1e-9) -> list[str]:
    """Drift messages, one per (variant, metric) out of tolerance; [] when all match."""
    try:
        base = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a baseline file: {e}") from None
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
