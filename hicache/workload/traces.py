"""Trace file readers (and a writer) producing :class:`Request` objects.

Two JSONL formats, one JSON object per line; blank lines are skipped; ``rid`` is the
request's order in the file from 0; line numbers in errors count from 1.

**Mooncake** (FAST'25 release)::

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}

``timestamp`` in ms (arrival = timestamp / 1000 s); one hash id per 512-token block,
``len(hash_ids) == ceil(input_length / 512)``. Block id ``b`` stands for the tokens
``b*512 .. b*512+511`` (the last block holds ``input_length - 512*(n-1)`` of them), so
requests sharing hash id ``b`` at block k share those tokens. Prompts are
:class:`BlockTokens` (lazy), one trace's sharing one memo of page-hash chains
(:class:`hicache.tiers.hashing.BlockChains`). Extra keys are ignored.

**Tokens** (this project's own)::

    {"arrival": 0.5, "tokens": [1, 2, 3], "output_len": 16,
     "session_id": "s1", "close_session": false, "client": 0, "round": 0}

``arrival`` seconds >= 0; ``tokens`` a non-empty list of ints >= 0; ``output_len`` int
>= 0; ``session_id`` (str), ``close_session`` (bool, default false), ``client`` and
``round`` (ints, default -1) optional. Unknown keys are errors.

Malformed input raises :class:`TraceFormatError` (a ``ValueError``) naming the file, the
line and the field.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hicache.tiers.hashing import BlockChains
from hicache.workload.request import Request
from hicache.workload.tokens import BlockTokens

MOONCAKE_BLOCK = 512
FORMATS = ("auto", "mooncake", "tokens")
_TOKEN_KEYS = {"arrival", "tokens", "output_len", "session_id", "close_session", "client", "round"}


_INT_ONLY = {int}  # the element types of a list of ints (bool is not int here)


class TraceFormatError(ValueError):
    """A malformed trace line; the message is ``file:line: field 'x': problem``."""


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_number(v: Any) -> bool:
    return (type(v) is int or type(v) is float) and math.isfinite(v)


class _Line:
    """Error context for one line."""

    __slots__ = ("path", "lineno", "obj")

    def __init__(self, path: Path, lineno: int, obj: dict) -> None:
        self.path, self.lineno, self.obj = path, lineno, obj

    def error(self, field: str | None, problem: str) -> TraceFormatError:
        where = f"{self.path}:{self.lineno}"
        return TraceFormatError(f"{where}: field {field!r}: {problem}" if field else
                                f"{where}: {problem}")

    def get(self, key: str, kind: str, minimum: float = 0) -> Any:
        if key not in self.obj:
            raise self.error(key, "missing key")
        v = self.obj[key]
        ok = _is_int(v) if kind == "int" else _is_number(v)
        if not ok:
            raise self.error(key, f"expected {'an integer' if kind == 'int' else 'a number'}, "
                             f"got {v!r}")
        if v < minimum:
            raise self.error(key, f"must be >= {minimum}, got {v!r}")
        return v

    def int_list(self, key: str) -> list[int]:
        if key not in self.obj:
            raise self.error(key, "missing key")
        v = self.obj[key]
        if not isinstance(v, list) or (v and set(map(type, v)) != _INT_ONLY):  # C-level
            raise self.error(key, "expected a list of integers")
        if v and min(v) < 0:
            raise self.error(key, f"negative id {min(v)}")
        if v and max(v) >= 1 << 63:
            raise self.error(key, f"id {max(v)} does not fit 64 bits (must be < 2**63)")
        return v


def _lines(path: Path, max_requests: int | None) -> Iterator[_Line]:
    count = 0
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, 1):
            if max_requests is not None and count >= max_requests:
                return
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceFormatError(
                    f"{path}:{lineno}: bad JSON: {e.msg} (column {e.colno})"
                ) from e
            line = _Line(path, lineno, obj)
            if not isinstance(obj, dict):
                raise line.error(None, f"expected a JSON object, got {type(obj).__name__}")
            count += 1
            yield line


def iter_mooncake_trace(path: str | Path, max_requests: int | None = None) -> Iterator[Request]:
    """Requests of a Mooncake trace, in file order (see module docstring)."""
    path = Path(path)
    chains = BlockChains(MOONCAKE_BLOCK)  # this trace's, shared by its prompts
    for rid, line in enumerate(_lines(path, max_requests)):
        ts = line.get("timestamp", "number")
        n_in = line.get("input_length", "int", 1)
        n_out = line.get("output_length", "int")
        ids = line.int_list("hash_ids")
        want = -(-n_in // MOONCAKE_BLOCK)
        if len(ids) != want:
            raise line.error("hash_ids", f"has {len(ids)} ids, input_length {n_in} needs "
                             f"ceil({n_in}/{MOONCAKE_BLOCK}) = {want}")
        tokens = BlockTokens(array("q", ids), n_in, MOONCAKE_BLOCK, chains)
        yield Request(rid=rid, arrival=ts / 1000.0, tokens=tokens, output_len=n_out)


def iter_token_trace(path: str | Path, max_requests: int | None = None) -> Iterator[Request]:
    """Requests of a token-level trace, in file order (see module docstring)."""
    path = Path(path)
    for rid, line in enumerate(_lines(path, max_requests)):
        extra = set(line.obj) - _TOKEN_KEYS
        if extra:
            raise line.error(sorted(extra)[0], f"unknown key; allowed: {sorted(_TOKEN_KEYS)}")
        arrival = line.get("arrival", "number")
        tokens = line.int_list("tokens")
        if not tokens:
            raise line.error("tokens", "empty prompt")
        out_len = line.get("output_len", "int")
        sid = line.obj.get("session_id")
        if sid is not None and not isinstance(sid, str):
            raise line.error("session_id", f"expected a string, got {sid!r}")
        close = line.obj.get("close_session", False)
        if not isinstance(close, bool):
            raise line.error("close_session", f"expected true or false, got {close!r}")
        client = line.get("client", "int", -1) if "client" in line.obj else -1
        rnd = line.get("round", "int", -1) if "round" in line.obj else -1
        yield Request(rid=rid, arrival=float(arrival), tokens=array("q", tokens),
                      output_len=out_len, session_id=sid, client=client, round=rnd,
                      close_session=close)


def detect_format(path: str | Path) -> str:
    """``mooncake`` if the first object has ``hash_ids``, ``tokens`` if it has ``tokens``."""
    path = Path(path)
    for line in _lines(path, 1):
        if "hash_ids" in line.obj:
            return "mooncake"
        if "tokens" in line.obj:
            return "tokens"
        raise line.error(None, "cannot tell the format: no 'hash_ids' or 'tokens' key")
    raise TraceFormatError(f"{path}: empty trace")


def load_trace(path: str | Path, fmt: str = "auto",
               max_requests: int | None = None) -> list[Request]:
    """All requests of a trace file (``fmt``: auto, mooncake or tokens)."""
    if fmt not in FORMATS:
        raise ValueError(f"trace format {fmt!r}; allowed: {list(FORMATS)}")
    if fmt == "auto":
        fmt = detect_format(path)
    reader = iter_mooncake_trace if fmt == "mooncake" else iter_token_trace
    return list(reader(path, max_requests))


def write_token_trace(path: str | Path, requests: Iterable[Request]) -> int:
    """Write requests in the tokens format; returns the number written."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in requests:
            obj: dict[str, Any] = {"arrival": r.arrival, "tokens": list(r.tokens),
                                   "output_len": r.output_len}
            if r.session_id is not None:
                obj["session_id"] = r.session_id
            if r.close_session:
                obj["close_session"] = True
            if r.client != -1:
                obj["client"] = r.client
            if r.round != -1:
                obj["round"] = r.round
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")
            n += 1
    return n
