"""L3 (storage tier) clients: page-hash keyed byte stores shared by the HiCache runtime.

Importing this package loads neither torch nor mooncake nor xxhash; backends import lazily.
:func:`guard` wraps a client the way the runtime uses it: checksummed pages over calls that
are bounded in time, retried and counted (:mod:`.checksum`, :mod:`.resilient`, :mod:`.faults`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_backend.l3.base import L3Client, L3Error, L3PartialError, check_keys_values
from gpu_backend.l3.faults import L3Faults
from gpu_backend.l3.file import FileL3

if TYPE_CHECKING:
    from gpu_backend.l3.checksum import ChecksummedL3
    from gpu_backend.l3.resilient import RetryPolicy

__all__ = ["FileL3", "L3Client", "L3Error", "L3Faults", "L3PartialError", "check_keys_values",
           "guard"]


def guard(client: Any, policy: RetryPolicy | None = None, page_bytes: int | None = None,
          name: str | None = None) -> ChecksummedL3:
    """``client`` behind checksums and deadlines: ChecksummedL3(ResilientL3(client)).
    Its ``faults`` counts what went wrong; no call raises a store failure."""
    from gpu_backend.l3.checksum import ChecksummedL3
    from gpu_backend.l3.resilient import ResilientL3

    faults = L3Faults(name or f"L3 ({type(client).__name__})")
    return ChecksummedL3(ResilientL3(client, policy, faults), faults, page_bytes)
