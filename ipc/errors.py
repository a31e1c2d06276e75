"""The error a caller of a runtime in another process sees when that process is gone
(importable without ZeroMQ, so a driver can catch it on a machine that has none)."""


class RuntimeProcessDied(RuntimeError):
    """The runtime process exited or stopped answering; its handles are gone with it."""
