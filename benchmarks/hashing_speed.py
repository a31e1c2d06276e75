"""Time the page-hash chain (hicache.tiers.hashing); prints a table. Not a test.

Run: ``PYTHONPATH=. python benchmarks/hashing_speed.py``.
Target: 100k tokens at page 64 well under 100 ms.
"""

from __future__ import annotations

import random
import time
from array import array

from hicache.tiers.hashing import PageHasher, page_hashes


def best_of(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    rng = random.Random(0)
    print(f"{'tokens':>9} {'page':>5} {'input':>6} {'pages':>6} {'ms':>8} {'Mtok/s':>7}")
    for n in (10_000, 100_000, 1_000_000):
        as_list = [rng.randrange(128_000) for _ in range(n)]
        as_array = array("q", as_list)
        for page in (1, 16, 64, 256):
            if page == 1 and n > 100_000:
                continue
            for kind, toks in (("list", as_list), ("array", as_array)):
                s = best_of(lambda t=toks, p=page: page_hashes(t, p))
                print(
                    f"{n:>9} {page:>5} {kind:>6} {n // page:>6} {s * 1e3:>8.2f} {n / s / 1e6:>7.1f}"
                )
    # a growing conversation: 50 turns of 2k tokens, hashed incrementally vs from scratch
    buf = array("q", (rng.randrange(128_000) for _ in range(100_000)))

    def incremental() -> None:
        h = PageHasher(64)
        for end in range(2_000, 100_001, 2_000):
            h.extend_to(buf[:end])

    def from_scratch() -> None:
        for end in range(2_000, 100_001, 2_000):
            page_hashes(buf[:end], 64)

    print(
        f"50 turns to 100k tokens, page 64: incremental {best_of(incremental) * 1e3:.2f} ms, "
        f"from scratch {best_of(from_scratch) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
