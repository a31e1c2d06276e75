"""A FULL-only tree reads a match's L1 and L1+L2 boundaries in the walk's own loop
(``UnifiedRadixTree._read``); the general reading (``_read_components``: the walked path,
then :func:`safe_boundary` per tier) must give the same result. Twin trees, one forced
onto the general reading, driven by the same operations, agree at every match and end
alike. L2 on, so demotions leave L1 holes that L2 still covers; by hand, L1 data goes
back on an L2-only node, an L1 node loses its L1 copy under L1 nodes, and a node is held
on neither tier (no operation of a FULL-only tree leaves one); and any chain of nodes
held on L1, L2, both or neither reads alike"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hicache.runtime.handles import Tier
from hicache.tree.components import Kind, TreeSpec
from tests.tree.tree_harness import Harness

seqs = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=5)
ops = st.lists(st.tuples(st.sampled_from(["match", "peek", "insert", "evict", "backup",
                                          "evict_host", "load", "hole", "strip"]),
                         st.integers(0, 4), st.integers(1, 6)), max_size=40)


def _summary(m) -> tuple:  # noqa: ANN001
    return (m.device_tokens, m.host_tokens, m.matched_pages, m.device_nodes,
            tuple(n.id for n in m.path))


def _twins() -> list[Harness]:
    trees = [Harness(TreeSpec(2), device_pages=40, host_enabled=True) for _ in range(2)]
    trees[1].tree._full_only = False  # the general reading (and reusable_tokens by match)
    return trees


def _load(h: Harness, pages: list, n: int) -> None:
    """Put L1 data back on the ``n``-th L2-only node of ``pages``' walk, if any."""
    walked = h.tree.match(pages, touch=False).path
    host_only = [x for x in walked if Kind.FULL not in x.device]
    if host_only:
        node = host_only[n % len(host_only)]
        ext = h.take(Tier.DEVICE, Kind.FULL, node.num_pages)
        h.tree.residency.put_value(node, Tier.DEVICE, Kind.FULL, ext)


def _hole(h: Harness, pages: list, n: int) -> None:
    """Copy the ``n``-th L1 node of ``pages``' walk to L2 and take its L1 data: an L2
    hole, maybe under L1 nodes."""
    walked = h.tree.match(pages, touch=False).path
    on_l1 = [x for x in walked if Kind.FULL in x.device and not x.backing_up]
    if on_l1:
        node = on_l1[n % len(on_l1)]
        if Kind.FULL not in node.host:
            h.complete_backup(h.begin_backup(node))
        h.alloc[(Tier.DEVICE, Kind.FULL)].free(
            h.tree.residency.pop_value(node, Tier.DEVICE, Kind.FULL))


def _strip(h: Harness, pages: list, n: int) -> None:
    """Take the ``n``-th node of ``pages``' walk off both tiers (a node held nowhere)."""
    walked = h.tree.match(pages, touch=False).path
    if walked:
        node = walked[n % len(walked)]
        for tier, values in ((Tier.DEVICE, node.device), (Tier.HOST, node.host)):
            if Kind.FULL in values:
                h.alloc[(tier, Kind.FULL)].free(
                    h.tree.residency.pop_value(node, tier, Kind.FULL))


@given(seqs, ops)
def test_the_walks_boundaries_equal_safe_boundary(sequences: list[list[int]],
                                                  script: list) -> None:
    trees = _twins()
    lists = [[h.pages(s) for s in sequences] for h in trees]
    for op, i, n in script:
        results: list[list] = [[], []]
        for h, pages, seen in zip(trees, lists, results, strict=True):
            p = pages[i % len(pages)]
            if op in ("match", "peek"):
                q = p[:n] if op == "peek" and n < 4 else p
                seen.append(_summary(h.tree.match(q, touch=op == "match")))
            elif h.change(op, p, n):
                pass
            elif op == "load":
                _load(h, p, n)
            elif op == "hole":
                _hole(h, p, n)
            else:
                _strip(h, p, n)
            # then every sequence's match, unstamped (its splits are the same in both)
            seen.extend(_summary(h.tree.match(q, touch=False)) for q in pages)
        assert results[0] == results[1]
    assert trees[0].state() == trees[1].state()


def _set_tiers(h: Harness, node, tiers: str) -> None:  # noqa: ANN001
    """Make ``node`` hold FULL on L1 and/or L2 as ``tiers`` says ("l1", "l2", "both",
    "none"), taking values in and out by hand."""
    for tier, want in ((Tier.HOST, tiers in ("l2", "both")),
                       (Tier.DEVICE, tiers in ("l1", "both"))):
        values = node.device if tier is Tier.DEVICE else node.host
        if want and Kind.FULL not in values:
            h.tree.residency.put_value(node, tier, Kind.FULL,
                                       h.take(tier, Kind.FULL, node.num_pages))
        elif not want and Kind.FULL in values:
            h.alloc[(tier, Kind.FULL)].free(h.tree.residency.pop_value(node, tier, Kind.FULL))


@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from(["l1", "l2", "both", "none"])),
                min_size=1, max_size=6),
       st.lists(st.integers(0, 20), min_size=1, max_size=4))
def test_any_chain_of_tiers_reads_alike(chain: list[tuple[int, str]],
                                        queries: list[int]) -> None:
    """A chain of nodes, each held on L1, L2, both or neither, matched by its prefixes
    and by pages that leave it inside a node (a split: the same in both trees)."""
    trees = _twins()
    results: list[list] = [[], []]
    for h, seen in zip(trees, results, strict=True):
        ids = list(range(1, sum(size for size, _ in chain) + 1))
        end = 0
        for size, _ in chain:
            end += size
            h.insert(h.pages(ids[:end]))
        nodes = h.tree.match(h.pages(ids), touch=False).path
        walked = [nodes[-1]] if nodes else []
        while walked and walked[-1].parent is not h.tree.root:
            walked.append(walked[-1].parent)
        for node, (_, tiers) in zip(reversed(walked), chain, strict=True):
            _set_tiers(h, node, tiers)
        for q in queries:  # a prefix of the chain, maybe leaving it inside a node
            pages = h.pages(ids[:q % (len(ids) + 1)] + ([99] if q > len(ids) else []))
            seen.append(_summary(h.tree.match(pages, touch=False)))
            seen.append(_summary(h.tree.match(h.pages(ids), touch=False)))
    assert results[0] == results[1]


def test_an_l1_node_below_an_l2_hole_counts_for_l1_l2_only() -> None:
    """[1 2] on L1, [3] on L2 only, [4] on L1 again: the L1 boundary ends before [3]; the
    L1+L2 one takes all three nodes; a node held nowhere below ends both."""
    for h in _twins():
        a = h.pages([1, 2])
        h.insert(a)
        h.insert(h.pages([1, 2, 3]))
        h.insert(h.pages([1, 2, 3, 4]))
        h.insert(h.pages([1, 2, 3, 4, 5]))
        x12, x3, x4, x5 = h.tree.match(h.pages([1, 2, 3, 4, 5]), touch=False).path
        h.complete_backup(h.begin_backup(x3))
        h.alloc[(Tier.DEVICE, Kind.FULL)].free(
            h.tree.residency.pop_value(x3, Tier.DEVICE, Kind.FULL))
        h.alloc[(Tier.DEVICE, Kind.FULL)].free(
            h.tree.residency.pop_value(x5, Tier.DEVICE, Kind.FULL))
        m = h.tree.match(h.pages([1, 2, 3, 4, 5, 6]), touch=False)
        assert (m.device_tokens, m.host_tokens, m.matched_pages) == (4, 4, 5)
        assert m.path == (x12, x3, x4) and m.device_nodes == 1
