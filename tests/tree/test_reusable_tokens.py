"""reusable_tokens(pages) (the router's length-only match) equals ``match(pages,
touch=False, memo=True).total_tokens`` and leaves the tree as that match leaves it (the
same splits, node ids, clock, changes and shape; nothing stamped): two trees driven by the
same operations, one peeking with reusable_tokens and one with match, agree at every peek
and end alike. L2 on, so evictions leave L1 holes that L2 still covers, and nodes that
hold neither (a walk that stopped counting, or stopped walking, there would differ)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache.runtime.handles import Tier
from hicache.tree.components import ComponentSpec, Kind, TreeSpec
from tests.tree.tree_harness import Harness

seqs = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=5)
ops = st.lists(st.tuples(st.sampled_from(["peek", "match", "insert", "evict", "backup",
                                          "evict_host"]),
                         st.integers(0, 4), st.integers(1, 6)), max_size=40)

SPECS = {
    "full": TreeSpec(2),
    "swa": TreeSpec(2, (ComponentSpec(Kind.FULL), ComponentSpec(Kind.SWA, window=4))),
}



@pytest.mark.parametrize("host", [True, False], ids=["l2", "l1"])
@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
@given(sequences=seqs, script=ops)
def test_reusable_tokens_is_the_peeks_total(spec: TreeSpec, host: bool,
                                            sequences: list[list[int]], script: list) -> None:
    trees = [Harness(spec, device_pages=40, host_enabled=host) for _ in range(2)]
    lists = [[h.pages(s) for s in sequences] for h in trees]
    for op, i, n in script:
        results = []
        for k, (h, pages) in enumerate(zip(trees, lists, strict=True)):
            p = pages[i % len(pages)][:n] if op == "peek" and n < 4 else pages[i % len(pages)]
            if op == "peek":
                results.append(h.tree.reusable_tokens(p) if k == 0 else
                               h.tree.match(p, touch=False, memo=True).total_tokens)
            elif op == "match":
                results.append(h.tree.match(p, memo=True).total_tokens)
            elif op == "insert":
                h.insert(p[:n])
            elif op == "backup":
                if host:
                    h.backup_l1(p)
            elif op == "evict":
                h.evict_device(n)
            elif host:
                h.evict_host(n)
        assert results[:1] == results[1:]
    assert trees[0].state() == trees[1].state()


def _l2_trunk_l1_leaf() -> Harness:
    """[1 2 3] on L2 only (backed up, then demoted) under [4 5] on L1."""
    h = Harness(TreeSpec(2), host_enabled=True)
    h.insert(h.pages([1, 2, 3]))
    (trunk,) = h.tree.match(h.pages([1, 2, 3]), touch=False).path
    h.complete_backup(h.begin_backup(trunk))
    h.evict_device(3)
    assert not trunk.device and Kind.FULL in trunk.host
    h.insert(h.pages([1, 2, 3, 4, 5]), {Kind.FULL: h.take(Tier.DEVICE, Kind.FULL, 2)})
    return h


def test_an_l2_trunk_counts_and_a_divergence_inside_a_node_splits_it() -> None:
    """A peek of [1 2 3 4 6] counts [1 2 3] (L2) and [4] (L1, split off [4 5]): 8 tokens,
    one split, as the match's; nothing stamped."""
    h, ref = _l2_trunk_l1_leaf(), _l2_trunk_l1_leaf()
    peek = h.pages([1, 2, 3, 4, 6])
    shape, clock = h.tree.shape, h.tree.clock
    assert h.tree.reusable_tokens(peek) == 8
    assert ref.tree.match(peek, touch=False, memo=True).total_tokens == 8
    assert h.tree.shape == shape + 1 and h.tree.clock == clock + 2  # the split's two ticks
    assert h.state() == ref.state()
    assert h.tree.reusable_tokens(peek) == 8 and h.tree.shape == shape + 1  # a repeat
    assert h.tree.reusable_tokens(h.pages([2, 1])) == 0


def test_the_walk_goes_on_past_a_node_held_nowhere() -> None:
    """A trunk without FULL on either tier (its value taken out by hand: no operation of a
    FULL-only tree leaves one) ends the count, and the walk still splits below it."""
    trees = [_l2_trunk_l1_leaf() for _ in range(2)]
    for h in trees:
        (trunk,) = h.tree.match(h.pages([1, 2, 3]), touch=False).path
        trunk.host.pop(Kind.FULL)
    peek = trees[0].pages([1, 2, 3, 4, 6])
    shape = trees[0].tree.shape
    assert trees[0].tree.reusable_tokens(peek) == 0
    assert trees[1].tree.match(peek, touch=False, memo=True).total_tokens == 0
    assert trees[0].tree.shape == shape + 1
    assert trees[0].state() == trees[1].state()
