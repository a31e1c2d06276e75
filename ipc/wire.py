"""The wire format between ProcessGPURuntime and its runtime server.

    request  = pickle((method, args))            one ZeroMQ message, one crossing
    reply    = pickle(("ok", value))
             | pickle(("err", exception))        re-raised in the caller, same type
             | pickle(("err", RemoteError))      when the exception itself will not pickle

Every value that crosses is a frozen message of :mod:`hicache.runtime.interface` (plans,
prepared handles, completions, RuntimeInfo) or a plain scalar; nothing per token and no
tensor. Pickle is what SGLang's scheduler and workers send over ZeroMQ too
(``send_pyobj``). The interface's dataclasses are reduced to ``(cls, field values)``
here: the default reduction of a slotted dataclass calls ``dataclasses.fields`` per
object both ways, which made a 256-request decode step cost ~8.5 ms of pickling per
batch on this machine; this one ~3 ms (``benchmarks/runtime_boundary.py``).
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import operator
import pickle
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

from hicache.runtime import handles, interface

PROTOCOL = 5

# methods a client may call: the RuntimeInterface, the driver helpers both runtimes
# have, and the server's own (stats, apply, close)
METHODS = frozenset({"info", "prepare_batch", "execute_batch", "execute_ref", "poll",
                     "wait", "now", "drain", "l3_faults", "timeline", "stats", "apply",
                     "close"})


# (generation) -> runtime; a module-level function or functools.partial, so it pickles and
# is rebuilt by reference in the runtime process
Factory = Callable[[int], Any]


class RemoteError(RuntimeError):
    """An exception raised in the runtime process that could not be sent as itself."""


def _reducers(*modules: ModuleType) -> dict[type, Callable[[Any], tuple]]:
    """``cls -> (lambda obj: (cls, field values))`` for the dataclasses of ``modules``;
    unpickling calls ``cls(*values)``, so __post_init__ checks run again on arrival."""
    table: dict[type, Callable[[Any], tuple]] = {}
    for mod in modules:
        for cls in vars(mod).values():
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)
                    and cls.__module__ == mod.__name__):
                continue
            names = [f.name for f in dataclasses.fields(cls) if f.init]
            get = operator.attrgetter(*names)
            if len(names) == 1:
                table[cls] = lambda o, cls=cls, get=get: (cls, (get(o),))
            else:
                table[cls] = lambda o, cls=cls, get=get: (cls, get(o))
    return table


DISPATCH = {**copyreg.dispatch_table, **_reducers(handles, interface)}


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=PROTOCOL)
    p.dispatch_table = DISPATCH
    p.dump(obj)
    return buf.getvalue()


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
