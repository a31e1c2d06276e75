"""Progress of a simulation on the console: a tqdm bar with an ETA on a terminal, a plain
line every ``every_s`` seconds (and at the end) when stderr is a log file.

The total is known up front where the workload fixes it (multi-turn: clients x rounds;
open-loop workloads issue every request at the start); otherwise it is the number issued so
far and the bar says so (``total grows``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO


def expected_requests(workload: Any) -> int | None:
    """Requests a workload will issue in all, when its kind fixes it (multiturn: clients x
    rounds). ``workload`` is a typed workload config or a mapping."""
    def get(key: str) -> Any:
        return workload.get(key) if isinstance(workload, Mapping) else getattr(workload, key,
                                                                                None)
    if workload is None or get("kind") != "multiturn":
        return None
    try:
        return int(get("num_clients")) * int(get("num_rounds"))
    except (TypeError, ValueError):
        return None


class Progress:
    """Call with ``(done, issued, sim_now)`` after each finished request; :meth:`close` at
    the end. ``label`` prefixes every line (the variant name)."""

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 every_s: float = 10.0, tty: bool | None = None) -> None:
        self.label, self.total, self.every_s = label, total, every_s
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._t0 = self._last = time.monotonic()
        self._done = 0
        self._bar = None
        if self.tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, unit="req", file=self.stream,
                             leave=False, dynamic_ncols=True)

    def __call__(self, done: int, issued: int, sim_now: float) -> None:
        self._done = done
        total = self.total if self.total is not None else issued
        if self._bar is not None:
            if self._bar.total != total:
                self._bar.total = total
            self._bar.update(done - self._bar.n)
            self._bar.set_postfix_str(f"t_sim={sim_now:.1f}s", refresh=False)
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._line(done, total, sim_now, now)

    def _line(self, done: int, total: int, sim_now: float, now: float) -> None:
        wall = now - self._t0
        eta = ""
        if self.total is not None and 0 < done < total:
            eta = f", ETA {wall * (total - done) / done:.0f} s"
        grows = "" if self.total is not None else " (total grows)"
        print(f"[{self.label}] {done}/{total} requests{grows}, {sim_now:.1f} s simulated, "
              f"{wall:.0f} s wall{eta}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
