"""Apply measured copy tables (``calibrated.copy``) to the PCIe model.

The analytic lone-copy time is call_overhead + (B + half_efficiency_bytes) / peak, a line
in B. A least-squares line t = c + B / rate through the measured [bytes, seconds] points
gives the peak (``rate``) directly; call_overhead is kept from the profile and the half
efficiency point absorbs the rest of the intercept: half = max(0, (c - overhead) * rate).
Then a lone copy in the simulator reproduces the fitted line. Directions are fitted
separately for the peak; the half-efficiency figure is the mean of the two fits.
"""

from __future__ import annotations

import dataclasses

from sim.hardware.profile import HardwareProfile, Table


def fit_line(table: Table) -> tuple[float, float]:
    """Least-squares (intercept seconds, bytes per second) of t = c + B / rate."""
    if len(table) < 2:
        raise ValueError("a copy table needs at least two points to fit")
    n = len(table)
    mx = sum(b for b, _ in table) / n
    my = sum(t for _, t in table) / n
    sxx = sum((b - mx) ** 2 for b, _ in table)
    slope = sum((b - mx) * (t - my) for b, t in table) / sxx
    if slope <= 0:
        raise ValueError("copy table time does not grow with bytes")
    return my - slope * mx, 1.0 / slope


def apply_copy_calibration(profile: HardwareProfile) -> HardwareProfile:
    """The profile with PCIe peaks and half-efficiency fitted to measured copy tables
    (unchanged when there are none). A table row may time ``calls_per_row`` calls of
    B/calls bytes each (one per layer and K/V): the fitted intercept is shared by them,
    so it is divided by that count before it becomes a per-call figure."""
    cal = profile.calibrated
    if cal is None or not (cal.copy_h2d and cal.copy_d2h):
        return profile
    pcie = profile.pcie
    fits = {"h2d": fit_line(cal.copy_h2d), "d2h": fit_line(cal.copy_d2h)}
    calls = cal.copy_calls_per_row
    halves = [max(0.0, (c / calls - pcie.call_overhead_s) * rate) for c, rate in fits.values()]
    new_pcie = dataclasses.replace(
        pcie, h2d_bytes_per_s=fits["h2d"][1], d2h_bytes_per_s=fits["d2h"][1],
        half_efficiency_bytes=sum(halves) / 2)
    return dataclasses.replace(profile, pcie=new_pcie)
