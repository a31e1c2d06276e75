"""Shared YAML loading: resolve a name, a path or a mapping, and read keys strictly.

Invariant: every missing or malformed key raises ValueError naming the source and the
dotted key, so a bad scenario file fails at load time, never mid-simulation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``989.0e12`` (YAML 1.2 floats; PyYAML needs ``e+12``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def resolve(source: str | Path | Mapping[str, Any], subdir: str) -> tuple[dict[str, Any], str]:
    """Return (mapping, origin). A bare name maps to ``scenarios/<subdir>/<name>.yaml``."""
    if isinstance(source, Mapping):
        return dict(source), "<mapping>"
    path = Path(source)
    if not path.suffix and len(path.parts) == 1:
        path = REPO_ROOT / "scenarios" / subdir / f"{path.name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (REPO_ROOT / "scenarios" / subdir).glob("*.yaml"))
        raise ValueError(f"{path}: no such {subdir} file; known {subdir}: {', '.join(known)} "
                         f"(or give a path to a YAML file)")
    with path.open() as fh:
        data = yaml.load(fh, Loader=_Loader)  # noqa: S506 (safe subclass)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: top level must be a mapping")
    return dict(data), str(path)


class Section:
    """A mapping read with strict typed accessors; errors name ``origin`` and the key path."""

    def __init__(self, data: Any, origin: str, prefix: str = "") -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"{origin}: {prefix or 'top level'} must be a mapping")
        self.data, self.origin, self.prefix = data, origin, prefix

    def _key(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise ValueError(f"{self.origin}: missing key {self._key(key)!r}")
            return default
        return self.data[key]

    def num(self, key: str, default: Any = ..., *, positive: bool = False) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(
                f"{self.origin}: key {self._key(key)!r} must be a number, got {value!r}")
        if value < 0 or (positive and value == 0):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} must be > 0, got {value!r}")
        return float(value)

    def int(self, key: str, default: Any = ..., *, positive: bool = False) -> int:
        value = self.num(key, default, positive=positive)
        if value != int(value):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} must be an integer")
        return int(value)

    def str(self, key: str, default: Any = ...) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} must be a string")
        return value

    def sub(self, key: str, default: Any = ...) -> Section:
        return Section(self.raw(key, default), self.origin, self._key(key))

    def table(self, key: str) -> tuple[tuple[float, float], ...]:
        """A list of [x, y] pairs with x strictly increasing and y >= 0."""
        rows = self.raw(key)
        try:
            pts = tuple((float(x), float(y)) for x, y in rows)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{self.origin}: key {self._key(key)!r} must be [[x, y], ...]") from exc
        if not pts or any(b[0] <= a[0] for a, b in zip(pts, pts[1:], strict=False)):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} needs increasing x values")
        if any(x <= 0 or y < 0 for x, y in pts):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} needs x > 0 and y >= 0")
        return pts
