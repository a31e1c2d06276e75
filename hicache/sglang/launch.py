"""Read an SGLang server configuration into ``{field_name: value}`` (SGLang's names).

Accepted forms (:func:`read_server_args`):
- a launch command: ``python -m sglang.launch_server --model-path M --tp 2 ...`` (also
  ``sglang serve ...``); values stay strings, boolean flags become True;
- a file holding such a command (line continuations and ``#`` comments allowed);
- a JSON or YAML mapping of server args (``/get_server_info`` returns one);
- the ``ServerArgs(model_path='...', tp_size=2, ...)`` text SGLang logs at start.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import Any

# SGLang 0.5.23 flags that take no value (store_true) among those we read or commonly see.
BOOLEAN_FLAGS = frozenset({
    "enable_hierarchical_cache", "disable_overlap_schedule", "disable_radix_cache",
    "enable_session_radix_cache", "trust_remote_code", "enable_dp_attention",
    "disable_cuda_graph", "enable_metrics", "enable_cache_report", "skip_tokenizer_init",
    "enable_torch_compile", "disable_chunked_prefix_cache", "enable_mixed_chunk",
    "enable_lmcache", "log_requests", "is_embedding", "enable_unified_memory",
})  # fmt: skip
# Aliases SGLang 0.5.23 declares, mapped to the field they set.
ALIASES = {
    "enable_hicache": "enable_hierarchical_cache", "model": "model_path",
    "tensor_parallel_size": "tp_size", "tp": "tp_size",
    "data_parallel_size": "dp_size", "dp": "dp_size",
    "pipeline_parallel_size": "pp_size",
}
_LAUNCHERS = ("sglang.launch_server", "sglang_router.launch_server")


class LaunchError(ValueError):
    """Server args we cannot read; the message says where and what."""


def _field(flag: str) -> str:
    name = flag.lstrip("-").replace("-", "_")
    return ALIASES.get(name, name)


def parse_command(text: str, source: str = "--from-sglang") -> dict[str, Any]:
    """Flags of a launch command, by SGLang field name; everything before the first flag
    (``python -m sglang.launch_server``, ``sglang serve``) is skipped."""
    text = re.sub(r"\\\s*\n", " ", text)
    lines = [ln.split(" #")[0] for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    try:
        tokens = shlex.split(" ".join(lines))
    except ValueError as e:
        raise LaunchError(f"{source}: cannot split the command ({e})") from None
    start = next((i for i, t in enumerate(tokens) if t.startswith("--")), len(tokens))
    head = tokens[:start]
    if head and not any(x in " ".join(head) for x in (*_LAUNCHERS, "sglang serve", "sglang")):
        raise LaunchError(f"{source}: expected an SGLang launch command (python -m "
                          f"sglang.launch_server --model-path ...), got {' '.join(head)!r}")
    out: dict[str, Any] = {}
    i = start
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise LaunchError(f"{source}: unexpected argument {tok!r} (not after a flag)")
        flag, eq, value = tok.partition("=")
        name = _field(flag)
        if eq:
            out[name] = value
        elif name in BOOLEAN_FLAGS:
            out[name] = True
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out[name] = tokens[i + 1]
            i += 1
        else:
            out[name] = True
        i += 1
    if not out:
        raise LaunchError(f"{source}: no flags found in the command")
    return out


def parse_server_args_repr(text: str, source: str) -> dict[str, Any]:
    """``ServerArgs(a=1, b='x', ...)`` -> ``{'a': 1, 'b': 'x'}`` (Python literals only)."""
    m = re.search(r"ServerArgs\((.*)\)", text, re.S)
    if not m:
        raise LaunchError(f"{source}: no ServerArgs(...) found")
    try:
        call = ast.parse(f"f({m.group(1)})", mode="eval").body
    except SyntaxError as e:
        raise LaunchError(f"{source}: cannot parse ServerArgs(...): {e.msg}") from None
    out = {}
    for kw in call.keywords:  # type: ignore[attr-defined]
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            out[kw.arg] = ast.unparse(kw.value)  # not a literal: keep its text
    return out


def read_server_args(spec: str) -> tuple[dict[str, Any], str]:
    """``(fields, source)`` from a command line, or from a file holding a command, a JSON /
    YAML mapping of server args, or a ``ServerArgs(...)`` line."""
    path = Path(spec)
    looks_like_file = "\n" not in spec and len(spec) < 4096 and " " not in spec.strip()
    if looks_like_file and path.is_file():
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise LaunchError(f"{source}: cannot read ({e.strerror})") from None
    elif looks_like_file:
        raise LaunchError(f"--from-sglang {spec!r}: no such file, and not a launch command")
    else:
        source, text = "--from-sglang", spec
    stripped = text.strip()
    if "ServerArgs(" in stripped:
        return parse_server_args_repr(stripped, source), source
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise LaunchError(f"{source}: line {e.lineno}: not valid JSON: {e.msg}") from None
        return _mapping(data, source), source
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*:", stripped):
        import yaml

        try:
            return _mapping(yaml.safe_load(stripped), source), source
        except yaml.YAMLError as e:
            raise LaunchError(f"{source}: not valid YAML: {e}") from None
    return parse_command(text, source), source


def _mapping(data: Any, source: str) -> dict[str, Any]:
    if isinstance(data, dict) and isinstance(data.get("server_args"), dict):
        data = data["server_args"]
    if not isinstance(data, dict):
        raise LaunchError(f"{source}: expected a mapping of server args")
    return {_field(str(k)): v for k, v in data.items()}
