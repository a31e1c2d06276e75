"""Cross-batch overlap: how much of batch N+1's H2D load ran under compute of earlier
batches (the seed's target timeline: "H2D for N+1" under "GPU compute N").

    issued_under   load batches whose first load started while an earlier batch was
                   computing (prepared while it ran: the scheduler's overlap at work)
    hidden_s       over all load rows (lane h2d, op load), their overlap with the union
                   of compute rows of batches numbered below theirs
    fraction       hidden_s / the duration of all load rows
    fraction_issued_under  the same over the load batches issued under an earlier batch

Only compute batches (ids > 0) count on either side; a load's overlap with its own
batch's compute (layer i+1 loading under layer i) is not cross-batch and is excluded. A
load issued while nothing computes cannot hide: ``fraction`` is bounded by how often
the workload admits a request with loads while a batch runs; ``fraction_issued_under``
says how well the runtime overlapped when it could.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hicache.report import intervals as iv


def cross_batch_overlap(tl: pd.DataFrame) -> dict[str, float | int | None]:
    """The measures above for a timeline frame (:func:`hicache.report.frames.
    timeline_frame`); fractions are None without loads."""
    loads = tl[(tl["lane"] == "h2d") & (tl["op"] == "load") & (tl["batch"] > 0)]
    compute = tl[(tl["lane"] == "compute") & (tl["batch"] > 0)]
    total = hidden = total_under = hidden_under = 0.0
    issued_under = 0
    for batch, rows in loads.groupby("batch"):
        duration = float((rows["end"] - rows["start"]).sum())
        total += duration
        earlier = compute[compute["batch"] < batch]
        if earlier.empty:
            continue
        union = iv.union(earlier["start"].to_numpy(), earlier["end"].to_numpy())
        got = float(np.sum(iv.overlap_each(union, rows["start"].to_numpy(),
                                           rows["end"].to_numpy())))
        hidden += got
        first = float(rows["start"].min())
        if ((earlier["start"] <= first) & (earlier["end"] > first)).any():
            issued_under += 1
            total_under += duration
            hidden_under += got
    return {"load_s": total, "hidden_s": hidden,
            "fraction": hidden / total if total > 0 else None,
            "load_batches": int(loads["batch"].nunique()), "issued_under": issued_under,
            "fraction_issued_under": hidden_under / total_under if total_under > 0 else None}
