"""Ablation: switch one modelled effect off in a profile and see whether the error grows.

Each effect is a name in the profile's ``ablate`` list (the simulator reads it: see
:data:`sim.hardware.profile.ABLATIONS`, :mod:`sim.cost`, :mod:`sim.host`). An effect
that does not make the prediction worse when it is switched off is not earning its place
(or is zero on the measured device, which the table says).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.hardware.profile import ABLATIONS

EFFECTS: dict[str, str] = {
    "context": "compute ignores the context (no keys/pairs terms: the old 1-D tables)",
    "knee": "compute fit is linear in tokens (no roofline knee)",
    "lm_head": "no LM head and sampling op",
    "embed": "no embedding time on layer 0",
    "in_situ": "ops as fast as the hot microbenchmarks (no in-situ terms)",
    "host_lane": "no driver-thread lane (setup, launches, copy issue, lane gaps)",
    "op_gap": "no lane hand-off gap between ops",
    "copy_calls": "copy calls counted as before (one per run and layer, K and V together)",
    "pipelined_issue": "copy calls issued and set up in series with the transfer",
    "scheduler_step": "no scheduler CPU time per step",
    "gather_dma": "the torch kernel backend modelled as SGLang's zero-copy kernel",
    "interpreter": "CPU runtime threads never contend for the interpreter lock (GIL)",
    "wakeup": "threads start at once when woken (no wake-up latency of driver or lanes)",
    "page_order": "pages handed out most recently freed first, not lowest first as torch",
}
assert set(EFFECTS) == set(ABLATIONS)


def ablated_profile(profile: str | Path, effect: str) -> dict[str, Any]:
    """The profile file as a mapping with ``effect`` switched off."""
    if effect not in EFFECTS:
        raise ValueError(f"--ablate: unknown effect {effect!r}; one of {', '.join(EFFECTS)}")
    from sim.hardware.loader import resolve

    data, _ = resolve(profile, "hardware")
    data = dict(data)
    data["ablate"] = sorted({*data.get("ablate", []), effect})
    if effect == "scheduler_step":
        data["cpu"] = {**data.get("cpu", {}), "scheduler_step_s": 0.0}
    data["name"] = f"{data.get('name', 'profile')}-without-{effect}"
    return data


def write(data: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
