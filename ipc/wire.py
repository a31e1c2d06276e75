"""The wire format between ProcessGPURuntime and its runtime server.

    request  = pickle((method, args))            one ZeroMQ message, one crossing
    reply    = pickle(("ok", value))
             | pickle(("err", exception))        re-raised in the caller, same type
             | pickle(("err", RemoteError))      when the exception itself will not pickle

Every value that crosses is a frozen message of :mod:`hicache.runtime.interface` (plans,
prepared handles, completions, RuntimeInfo) or a plain scalar; nothing per token and no
tensor. Pickle is what SGLang's scheduler and workers send over ZeroMQ too
(``send_pyobj``); protocol 5 is the fastest the standard library has.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from typing import Any

PROTOCOL = 5

# methods a client may call: the RuntimeInterface, the driver helpers both runtimes
# have, and the server's own (stats, apply, close)
METHODS = frozenset({"info", "prepare_batch", "execute_batch", "poll", "wait", "now",
                     "drain", "l3_faults", "timeline", "stats", "apply", "close"})


# (generation) -> runtime; a module-level function or functools.partial, so it pickles and
# is rebuilt by reference in the runtime process
Factory = Callable[[int], Any]


class RemoteError(RuntimeError):
    """An exception raised in the runtime process that could not be sent as itself."""


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=PROTOCOL)


def loads(data: bytes) -> Any:
    return pickle.loads(data)


def error_reply(exc: BaseException) -> bytes:
    """``("err", exc)`` with the remote traceback as a note; a RemoteError if ``exc`` does
    not survive a pickle round trip."""
    tb = "".join(traceback.format_exception(exc))
    try:
        exc.add_note(f"raised in the runtime process:\n{tb}")
        data = dumps(("err", exc))
        loads(data)
        return data
    except Exception:  # noqa: BLE001 - any pickling failure falls back to text
        return dumps(("err", RemoteError(f"{type(exc).__name__}: {exc}\n{tb}")))
