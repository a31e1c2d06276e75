"""Hybrid replay with L2 (``--swa-window/--mamba-slots --l2-tokens``): a small L1 with an
L2 that keeps everything reuses what an L1 holding everything reuses (write_through),
partly from L2 (every component backed up and loaded back); write_back reuses no more; a
small L2 drops copies per component and the pools stay balanced; L3 is refused."""

from __future__ import annotations

import random

import pytest

from hicache.cli import main
from hicache.config import CacheConfig
from hicache.replay.engine import ReplayCache
from hicache.runtime.handles import Tier
from hicache.tree.invariants import check_tree
from hicache.workload.request import Request


def conversations(seed: int, n: int = 60) -> list[list[int]]:
    """Multi-turn prompts: each extends an earlier one by fresh tokens (or starts anew)."""
    rng = random.Random(seed)
    prompts: list[list[int]] = []
    fresh = 10_000
    for _ in range(n):
        base = rng.choice(prompts) if prompts and rng.random() < 0.7 else []
        k = rng.randint(4, 20)
        prompts.append(base + list(range(fresh, fresh + k)))
        fresh += k
    return prompts


def hybrid(full_tokens: int, *, swa_window: int = 0, mamba_slots: int = 0,
           host_tokens: int = 0, write_policy: str = "write_through",
           load_back_threshold: int = 10) -> ReplayCache:
    """The cache manager in zero time over a hybrid model (page 4), L2 when host_tokens."""
    cfg = CacheConfig(page_size=4, device_tokens=full_tokens,
                      enable_hierarchical_cache=host_tokens > 0,
                      hicache_write_policy=write_policy,
                      load_back_threshold=load_back_threshold)
    return ReplayCache(cfg, host_tokens=host_tokens, swa_window=swa_window,
                       mamba_slots=mamba_slots)


def replay(cache: ReplayCache, prompts: list[list[int]]) -> list[tuple[int, int]]:
    out = []
    for i, p in enumerate(prompts):
        r = cache.process(Request(i, float(i), p, 1))
        out.append((r.device_hit, r.host_hit))
    return out


def balanced(cache: ReplayCache) -> bool:
    tiers = ((Tier.DEVICE, cache.pools), (Tier.HOST, cache.host_pools))
    return all(a.used_pages == cache.tree.held_pages(tier, kind)
               for tier, pools in tiers for kind, a in pools.items())


@pytest.mark.parametrize("write", ["write_through", "write_back"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_small_l1_with_l2_reuses_what_a_large_l1_does(seed: int, write: str):
    kw = {"swa_window": 8, "load_back_threshold": 0}
    prompts = conversations(seed)
    big = replay(hybrid(1 << 16, mamba_slots=4096, **kw), prompts)
    small = hybrid(96, mamba_slots=6, host_tokens=1 << 16, write_policy=write, **kw)
    got = replay(small, prompts)
    if write == "write_through":  # every component copied at insert: nothing is lost
        assert [d + h for d, h in got] == [d for d, _ in big]
    else:  # an SWA/MAMBA tombstone on L1 is not backed up first (README): at most as much
        assert all(d + h <= b for (d, h), (b, _) in zip(got, big, strict=True))
    assert sum(h for _, h in got) > 0 and sum(d for d, _ in got) > 0
    check_tree(small.tree)
    assert balanced(small)


def test_a_small_l2_drops_copies_per_component_and_stays_balanced():
    prompts = conversations(3, 120)
    cache = hybrid(96, swa_window=8, mamba_slots=6, host_tokens=400, load_back_threshold=0)
    got = replay(cache, prompts)
    assert sum(h for _, h in got) > 0
    check_tree(cache.tree)
    assert balanced(cache)


def test_l2_on_the_command_line_and_l3_refused(tmp_path, capsys) -> None:  # noqa: ANN001
    trace = tmp_path / "t.jsonl"
    chains = [list(range(1000 * c, 1000 * c + 8 * (i // 2 + 1))) for i, c in
              ((i, i % 2) for i in range(8))]  # two conversations in turn, L1 holds one
    lines = [f'{{"arrival": {i}, "tokens": {t}, "output_len": 1}}' for i, t in enumerate(chains)]
    trace.write_text("\n".join(lines) + "\n")
    args = ["replay", "--trace", str(trace), "--format", "tokens", "--page-size", "4",
            "--mamba-slots", "4", "--capacity-tokens", "40", "--json"]
    assert main(args + ["--l2-tokens", "1000"]) == 0
    out = capsys.readouterr().out
    assert '"host_hit_rate"' in out and '"host_hit_tokens": 0' not in out
    assert main(args + ["--l3"]) == 2
    assert "no L3 path" in capsys.readouterr().err
