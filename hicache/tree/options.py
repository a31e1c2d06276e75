"""Where the tree may depart from SGLang 0.5.23's ``UnifiedRadixCache``: all off = SGLang.

The default tree makes every decision SGLang makes (``tests/oracle`` replays SGLang's own
results). An option here is a deliberate improvement, kept switchable so that a study can
say what it changes; each docstring gives the measured difference. A scenario sets them
as ``cache.tree_options`` (typed, validated, in the JSON schema).
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache.schema.plain import Plain
from hicache.schema.types import Bool


@dataclass(frozen=True)
class TreeOptions(Plain):
    """The scenario key ``cache.tree_options`` (``--set
    cache.tree_options.free_swa_tombstone_leaves=true``); replay reads the same keys."""

    free_swa_tombstone_leaves: Bool = False
    """When an eviction leaves a parent as an unlocked device leaf whose SWA data is a
    tombstone, evict that parent too (iteratively). No live window ends at such a node, so
    it can never end a reuse boundary; SGLang keeps it until FULL eviction reaches it on
    its own recency. Measured on the Mooncake conversation trace (12,031 requests, page
    64, ``hicache-lab replay --swa-window 4096``): hit rate 8.755% with the option against
    8.674% without at 4M tokens of L1, unchanged (4.499%) at 1M."""


SGLANG = TreeOptions()  # the default: every decision as SGLang 0.5.23 makes it
