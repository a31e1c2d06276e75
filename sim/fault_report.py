"""What the injected faults cost: summary.json's ``faults`` list and run-level deltas.

Per fault (in ``faults:`` order), from the run itself:
- ``requests_exposed``: requests waiting for their first token while it lasted
  ([arrival, first token) overlaps [start, end));
- ``requests_lost_hits`` and ``extra_recompute_tokens``: requests whose L3 prefetch the
  fault touched (a failed, timed-out or skipped call, a slow path while it ran, or keys
  it lost, possibly after its window) and that got fewer L3 hits than a store without
  faults held (capped by what the prefetch could take), and
  those tokens, recomputed instead of loaded (an estimate: the twin's
  ``fault_extra_prefill_tokens`` is the end-to-end figure);
- the L3 calls it failed (``l3_errors``, ``l3_timeouts``, ``l3_skipped``), the pages a
  failed store did not write (``store_pages_failed``) and the keys it lost (``keys_lost``).
Against the fault-free twin (``run.fault_twin``; requests matched by client and round,
else by id): per fault the mean TTFT change of the requests it exposed and how many got
slower; for the run ``fault_ttft_mean_delta_s``, ``fault_ttft_p90_delta_s`` and
``fault_extra_prefill_tokens`` (prompt tokens computed beyond the twin's, all faults).
Deltas of one fault are attributed by exposure: with overlapping faults, a request
exposed to both counts for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hicache.schema.plain import to_plain
from sim.faults import FaultLedger

SLOWER_S = 1e-3  # a TTFT this much above the twin's counts as slower

COUNTS = ("keys_lost", "l3_errors", "l3_timeouts", "l3_skipped", "store_pages_failed")


def fault_costs(ledger: FaultLedger, records: Sequence[dict], page_size: int,
                twin: Sequence[dict] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """(one dict per fault, run-level totals) for summary.json (module doc)."""
    deltas = _ttft_deltas(records, twin) if twin is not None else None
    out = []
    for i, cost in enumerate(ledger.costs):
        f = cost.fault
        row: dict[str, Any] = {"index": i, **to_plain(f), "applies": cost.applies}
        started = cost.started is not None
        end = cost.ended if cost.ended is not None else f.end
        row["active_s"] = (min(end, _last(records)) - cost.started) if started else 0.0
        exposed = [r for r in records if started and _exposed(r, f.start, f.end)]
        row["requests_exposed"] = len(exposed)
        short = ledger.shortfalls(i, records, page_size)
        row["requests_lost_hits"] = sum(1 for v in short.values() if v > 0)
        row["extra_recompute_tokens"] = sum(short.values())
        row.update({k: cost.counts[k] for k in COUNTS})
        if deltas is not None:
            d = [deltas[_key(r)] for r in exposed if _key(r) in deltas]
            row["ttft_delta_mean_s"] = float(np.mean(d)) if d else 0.0
            row["requests_slower"] = sum(1 for x in d if x > SLOWER_S)
        out.append(row)
    totals: dict[str, Any] = {"n_faults": len(out),
                              "fault_extra_recompute_tokens": sum(
                                  r["extra_recompute_tokens"] for r in out)}
    if twin is not None:
        totals.update(_twin_totals(records, twin))
    return out, totals


def _last(records: Sequence[dict]) -> float:
    ends = [r["finish"] for r in records if r.get("finish") is not None]
    return max(ends) if ends else 0.0


def _exposed(r: dict, start: float, end: float) -> bool:
    until = r.get("first_token")
    until = r.get("finish") if until is None else until
    return r["arrival"] < end and (until is None or until > start)


def _key(r: dict) -> Any:
    if r.get("client") is not None and r.get("round") is not None:
        return ("client", r["client"], r["round"])
    return ("rid", r["rid"])


def _ttft_deltas(records: Sequence[dict], twin: Sequence[dict]) -> dict[Any, float]:
    base = {_key(r): r["ttft"] for r in twin if r.get("ttft") is not None}
    return {_key(r): r["ttft"] - base[_key(r)] for r in records
            if r.get("ttft") is not None and _key(r) in base}


def _twin_totals(records: Sequence[dict], twin: Sequence[dict]) -> dict[str, float]:
    def ttfts(rs: Sequence[dict]) -> np.ndarray:
        return np.array([r["ttft"] for r in rs if r.get("ttft") is not None], dtype=float)

    def computed(rs: Sequence[dict]) -> int:
        return sum(r["prompt_tokens"] - r["cached_tokens"] for r in rs
                   if r.get("first_token") is not None)
    a, b = ttfts(records), ttfts(twin)
    if not len(a) or not len(b):
        return {}
    return {"fault_ttft_mean_delta_s": float(a.mean() - b.mean()),
            "fault_ttft_p90_delta_s": float(np.quantile(a, 0.9) - np.quantile(b, 0.9)),
            "fault_extra_prefill_tokens": computed(records) - computed(twin)}
