"""Shared YAML loading: resolve a name, a path or a mapping, and read keys strictly.

Invariant: every missing or malformed key raises ValueError naming the source and the
dotted key (numbers must be finite), so a bad file fails at load time, never
mid-simulation. YAML is read strictly (:mod:`hicache.schema.yamlio`: duplicate keys are
errors, ``1e12`` is a number).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hicache.presets import read_preset
from hicache.schema.errors import suggest


def resolve(source: str | Path | Mapping[str, Any], subdir: str, *,
            base: Path | None = None) -> tuple[dict[str, Any], str]:
    """Return (mapping, origin). A bare name is a bundled preset of ``subdir``
    (:func:`hicache.presets.find_preset`); a relative path resolves against ``base``. A
    mapping's origin names the profile its ``name`` key gives (a scenario's ``--set
    hardware.KEY=VALUE`` turns a named profile into such a mapping)."""
    if isinstance(source, Mapping):
        name = source.get("name")
        return dict(source), "<mapping>" + (f" ({subdir} {name!r})" if isinstance(name, str)
                                            else "")
    return read_preset(subdir, source, base=base)


class Section:
    """A mapping read with strict typed accessors; errors name ``origin`` and the key path.

    Every key the loader asks about (read, defaulted or tested with :meth:`has`) is known;
    :meth:`finish` then refuses any other key in this section or its sub-sections (a typo
    such as ``l3: {mooncak: ...}`` fails instead of being ignored). Reading :attr:`data`
    directly makes every key of the section known (the caller checks them).
    """

    def __init__(self, data: Any, origin: str, prefix: str = "") -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"{origin}: {prefix or 'top level'} must be a mapping")
        self._data, self.origin, self.prefix = data, origin, prefix
        self._known: set[str] = set()
        self._subs: list[Section] = []

    @property
    def data(self) -> Mapping[str, Any]:
        self._known.update(map(str, self._data))
        return self._data

    def _key(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        self._known.add(key)
        return key in self._data

    def raw(self, key: str, default: Any = ...) -> Any:
        self._known.add(key)
        if key not in self._data:
            if default is ...:
                raise ValueError(f"{self.origin}: missing key {self._key(key)!r}")
            return default
        return self._data[key]

    def finish(self, skip: tuple[str, ...] = ()) -> None:
        """Raise for a key of this section (or a sub-section) the loader never asked about;
        sub-sections whose key path is in ``skip`` are not checked."""
        if self.prefix in skip:
            return
        for k in self._data:
            if str(k) not in self._known:
                raise ValueError(f"{self.origin}: key {self._key(str(k))!r}: "
                                 f"{suggest(str(k), sorted(self._known))}")
        for s in self._subs:
            s.finish(skip)

    def num(self, key: str, default: Any = ..., *, positive: bool = False) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                not math.isfinite(value)):
            raise ValueError(
                f"{self.origin}: key {self._key(key)!r} must be a finite number, got {value!r}")
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
        s = Section(self.raw(key, default), self.origin, self._key(key))
        self._subs.append(s)
        return s

    def table(self, key: str) -> tuple[tuple[float, float], ...]:
        """A list of [x, y] pairs with x strictly increasing and y >= 0."""
        rows = self.raw(key)
        try:
            pts = tuple((float(x), float(y)) for x, y in rows)
            if not all(map(math.isfinite, (v for p in pts for v in p))):
                raise ValueError("not finite")
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{self.origin}: key {self._key(key)!r} must be [[x, y], ...]") from exc
        if not pts or any(b[0] <= a[0] for a, b in zip(pts, pts[1:], strict=False)):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} needs increasing x values")
        if any(x <= 0 or y < 0 for x, y in pts):
            raise ValueError(f"{self.origin}: key {self._key(key)!r} needs x > 0 and y >= 0")
        return pts
