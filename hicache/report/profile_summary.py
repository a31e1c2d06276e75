"""A calibrated hardware profile as a short console summary with sanity checks.

Checks (each PASS or FAIL, tolerances stated in the line):
- every measured figure is finite and > 0 (a zero or NaN bandwidth would hang or mislead
  the simulator);
- copy and compute time tables grow with size, allowing ``noise`` (10%) of measurement
  noise between neighbouring rows;
- both directions at once move no more than the two directions alone, plus ``noise``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

NOISE = 0.10
FIGURES = [  # (section, key, label, unit scale, unit)
    ("pcie", "h2d_bytes_per_s", "H2D copy", 1e-9, "GB/s"),
    ("pcie", "d2h_bytes_per_s", "D2H copy", 1e-9, "GB/s"),
    ("pcie", "bidirectional_bytes_per_s", "both directions", 1e-9, "GB/s"),
    ("pcie", "call_overhead_s", "per-copy call", 1e6, "us"),
    ("io_kernel", "bytes_per_s", "copy kernel", 1e-9, "GB/s"),
    ("io_kernel", "compute_slowdown", "compute slowdown under copies", 100, "%"),
    ("cpu", "scheduler_step_s", "scheduler step", 1e3, "ms"),
]


def _grows(rows: Sequence[Sequence[float]], noise: float) -> bool:
    times = [float(t) for _, t in rows]
    return all(b >= a * (1 - noise) for a, b in zip(times, times[1:], strict=False))


def check_profile(profile: Mapping[str, Any], noise: float = NOISE) -> list[tuple[str, bool]]:
    """``[(check, passed)]`` for a profile mapping as ``calibrate`` writes it."""
    out = []
    values = [(f"{s}.{k}", (profile.get(s) or {}).get(k)) for s, k, *_ in FIGURES]
    bad = [name for name, v in values if v is not None and not (
        isinstance(v, int | float) and math.isfinite(v) and (v > 0 or name.endswith(
            "compute_slowdown")))]
    out.append(("every figure finite and > 0" + (f" (not: {', '.join(bad)})" if bad else ""),
                not bad))
    cal = profile.get("calibrated") or {}
    tables = {f"copy {k}": v for k, v in (cal.get("copy") or {}).items() if isinstance(v, list)}
    tables |= {k: cal[k] for k in ("prefill_layer", "decode_layer") if isinstance(cal.get(k),
                                                                                  list)}
    for name, rows in tables.items():
        out.append((f"{name} time grows with size (within {noise:.0%})", _grows(rows, noise)))
    p = profile.get("pcie") or {}
    if all(isinstance(p.get(k), int | float) for k in ("h2d_bytes_per_s", "d2h_bytes_per_s",
                                                       "bidirectional_bytes_per_s")):
        limit = (p["h2d_bytes_per_s"] + p["d2h_bytes_per_s"]) * (1 + noise)
        out.append((f"both directions <= H2D + D2H (within {noise:.0%})",
                    p["bidirectional_bytes_per_s"] <= limit))
    return out


def format_profile_summary(profile: Mapping[str, Any], noise: float = NOISE) -> tuple[str, bool]:
    """(text, all checks passed): the measured figures, then one line per check."""
    lines = [f"profile {profile.get('name', '?')}:"]
    for section, key, label, scale, unit in FIGURES:
        v = (profile.get(section) or {}).get(key)
        if isinstance(v, int | float):
            lines.append(f"  {label:<32} {v * scale:10.3g} {unit}")
    checks = check_profile(profile, noise)
    lines += [f"  {'PASS' if ok else 'FAIL'}  {name}" for name, ok in checks]
    ok = all(passed for _, passed in checks)
    lines.append(f"calibration checks: {'all pass' if ok else 'FAILED'} "
                 f"({sum(p for _, p in checks)}/{len(checks)})")
    return "\n".join(lines), ok
