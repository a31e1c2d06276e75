"""L3 fault counters and their warnings, shared by the layers that guard one L3 client.

Invariants: every fault that turned an L3 operation into a miss or a failed store is
counted exactly once under one name (``COUNTERS``); the first fault of each kind logs one
warning that names it and says that the rest are only counted; counters are safe to bump
from any thread and read as a plain dict (``summary.json``-ready).
"""

from __future__ import annotations

import logging
import threading

from hicache.tiers.l3_guard import COUNTERS  # one list of counters for both runtimes

__all__ = ["COUNTERS", "L3Faults"]

log = logging.getLogger("hicache.l3")


class L3Faults:
    """Thread-safe counters, one warning per kind (``warn``) for the client ``name``."""

    def __init__(self, name: str = "L3") -> None:
        self.name = name
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def count(self, counter: str, n: int = 1) -> None:
        if counter not in self._counts:
            raise KeyError(f"unknown L3 fault counter {counter!r}; known: {list(COUNTERS)}")
        with self._lock:
            self._counts[counter] += n

    def warn(self, kind: str, message: str) -> None:
        """Log ``message`` the first time ``kind`` happens; later ones are only counted."""
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        log.warning("%s: %s (further %s faults are counted, not logged: see l3_faults)",
                    self.name, message, kind)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def __bool__(self) -> bool:
        """True once any fault was counted (reconnects included)."""
        with self._lock:
            return any(self._counts.values())

    def log_summary(self) -> None:
        """Log :meth:`summary` as one warning (a run's end, when any fault was counted)."""
        log.warning("%s; the pages involved were recomputed or not stored", self.summary())

    def summary(self) -> str:
        """One line for the console, e.g. ``L3 faults: 3 l3_errors, 2 l3_timeouts``."""
        counts = self.as_dict()
        parts = [f"{v} {k}" for k, v in counts.items() if v]
        return f"{self.name} faults: {', '.join(parts) if parts else 'none'}"
