"""L3 (storage tier) clients: page-hash keyed byte stores shared by the HiCache runtime.

Importing this package loads neither torch nor mooncake; backends import lazily.
"""

from gpu_backend.l3.base import L3Client, check_keys_values
from gpu_backend.l3.file import FileL3

__all__ = ["FileL3", "L3Client", "check_keys_values"]
