"""Which in-flight ops use which pages, so a freed page waits only for those.

    use(tier, pages, event, pool)   an op that reads or writes ``pages`` of ``pool`` is
                                    queued; it is done when ``event`` is
    fence(tier, pages, pool)        the events a free of those pages must wait for

Invariant: every op the runtime queues on a page registers here before prepare_batch can
free that page, so a page is handed out again only after every op that touched it
finished; a page no in-flight op uses is reusable at once. Fencing on the whole lanes
instead (every lane's last op) is as safe but makes the next batch's loads wait for the
running batch whenever L1 is full, which is exactly when the scheduler wants them to
overlap it (seed 000: H2D of N+1 under compute of N).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_backend.streams import LaneEvent
from hicache.runtime.handles import Kind, Tier


class PageFences:
    def __init__(self) -> None:
        self._uses: list[tuple[Tier, Kind, frozenset[int], LaneEvent]] = []

    def use(self, tier: Tier, pages: Iterable[int], event: LaneEvent,
            pool: Kind = Kind.FULL) -> None:
        pages = frozenset(pages)
        if pages:
            self._prune()
            self._uses.append((tier, pool, pages, event))

    def fence(self, tier: Tier, pages: Iterable[int], pool: Kind = Kind.FULL
              ) -> list[LaneEvent]:
        self._prune()
        wanted = set(pages)
        return [ev for t, p, used, ev in self._uses
                if t is tier and p is pool and not used.isdisjoint(wanted)]

    def _prune(self) -> None:
        self._uses = [u for u in self._uses if not u[3].is_done()]
