"""Strict YAML: duplicate keys are errors, ``1e12`` is a number, every key has a line.

    read_yaml(path)  -> YamlDoc(data, source, lines)   lines: {("cache", "page_size"): 7}
    read_yaml_text(text, source)

PyYAML reads YAML 1.1, where ``1e12`` (no dot, no sign) is a string; the loader adds the
YAML 1.2 float form. Anchors are walked once (an alias bomb costs no time here). Every
failure is an :class:`InputError` whose message starts ``source:line:column:``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hicache.schema.errors import InputError

Path_ = tuple[str | int, ...]


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``989.0e12`` and ``1e12`` as floats (YAML 1.2)."""


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


@dataclass(frozen=True)
class YamlDoc:
    """A parsed document: ``data``, where it came from, and the line of each key path."""

    data: Any
    source: str
    lines: Mapping[Path_, int] = field(default_factory=dict)


def _where(source: str, mark: Any) -> str:
    return f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str,
          seen: set[int]) -> None:
    """Record key lines and refuse duplicate keys (aliases are walked once)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[Any, yaml.Node] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                _walk(v, path, lines, source, seen)
                continue
            key = k.value
            if key in keys:
                first = keys[key].start_mark.line + 1
                raise InputError(f"{_where(source, k.start_mark)}: duplicate key {key!r} "
                                 f"(first given on line {first}); give each key once")
            keys[key] = k
            lines.setdefault((*path, key), k.start_mark.line + 1)
            _walk(v, (*path, key), lines, source, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.setdefault((*path, i), item.start_mark.line + 1)
            _walk(item, (*path, i), lines, source, seen)


def read_yaml_text(text: str, source: str) -> YamlDoc:
    """Parse one YAML document strictly (see module docstring)."""
    loader = None
    try:
        loader = StrictLoader(text)
        node = loader.get_single_node()
        if node is None:
            return YamlDoc(None, source)
        lines: dict[Path_, int] = {}
        _walk(node, (), lines, source, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise InputError(f"{_where(source, mark)}: YAML syntax error: "
                         f"{e.problem or e.context}") from None
    except yaml.reader.ReaderError as e:
        raise InputError(f"{source}: character {e.position + 1}: {e.reason} "
                         f"(#x{e.character:04x})") from None
    except yaml.YAMLError as e:
        raise InputError(f"{source}: YAML error: {e}") from None
    except RecursionError:
        raise InputError(f"{source}: YAML nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDoc(data, source, lines)


def read_text(path: str | Path) -> str:
    """The UTF-8 text of ``path``; a missing, unreadable or binary file names the path."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None


def read_yaml(path: str | Path) -> YamlDoc:
    """Read and parse ``path``; a missing or unreadable file names the path."""
    return read_yaml_text(read_text(path), str(path))
