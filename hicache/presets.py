"""Where bundled presets live, and how a name or a path becomes a file.

    find_preset("hardware", "h100-sxm")        -> <data>/hardware/h100-sxm.yaml
    find_preset("models", "other/m.yaml")      -> that path (relative to ``base``, else cwd)
    find_preset("scenarios", "quick")          -> <data>/quick.yaml

``<data>`` (:func:`data_root`) is the package data of an installed wheel
(``hicache/_bundled``, mapped from the repository's ``scenarios/`` folder by ``setup.py``) or,
in a source checkout (editable install, ``PYTHONPATH``), the repository's ``scenarios/``.
A bare name (no suffix, no folder) is a preset; anything else is a path. Errors name what
was looked for, where, and the known names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hicache.schema.errors import InputError
from hicache.schema.yamlio import read_yaml

KINDS = {"hardware": "hardware", "models": "models", "scenarios": ".", "traces": "traces"}
_PACKAGE = Path(__file__).resolve().parent


def data_root() -> Path:
    """The folder of bundled presets (see module docstring)."""
    for root in (_PACKAGE / "_bundled", _PACKAGE.parent / "scenarios"):
        if (root / "models").is_dir():
            return root
    raise InputError(f"no bundled presets under {_PACKAGE}: the installation is incomplete "
                     "(reinstall hicache-lab)")


def preset_dir(kind: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"preset kind {kind!r}; allowed: {', '.join(KINDS)}")
    return (data_root() / KINDS[kind]).resolve()


def known(kind: str) -> list[str]:
    """Names of the bundled presets of ``kind``."""
    folder = preset_dir(kind)
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def is_name(ref: str | Path) -> bool:
    """A bare preset name: no suffix and no folder (``h100-sxm``, not ``./h100-sxm.yaml``)."""
    p = Path(ref)
    return not p.suffix and len(p.parts) == 1 and str(ref) not in ("", ".", "..")


def find_preset(kind: str, ref: str | Path, *, base: Path | None = None) -> Path:
    """The file ``ref`` names: a bundled preset of ``kind`` or a path (relative paths
    resolve against ``base``, the folder of the file that names them, else the cwd)."""
    singular = {"models": "model", "scenarios": "scenario"}.get(kind, kind)
    if is_name(ref):
        path = preset_dir(kind) / f"{ref}.yaml"
        if not path.is_file():
            names = ", ".join(known(kind)) or "(none)"
            raise InputError(f"{singular} {str(ref)!r}: no such preset; known: {names} "
                             f"(or give a path to a YAML file)")
        return path
    path = Path(ref).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise InputError(f"{singular} file {str(ref)!r}: not found (looked at {path})")
    return path


def read_preset(kind: str, ref: str | Path, *, base: Path | None = None
                ) -> tuple[dict[str, Any], str]:
    """The mapping in the file ``ref`` names (:func:`find_preset`) and that file's name;
    a file whose top level is not a mapping is an error naming it."""
    doc = read_yaml(find_preset(kind, ref, base=base))
    if not isinstance(doc.data, Mapping):
        raise InputError(f"{doc.source}: top level must be a mapping, got "
                         f"{type(doc.data).__name__}")
    return dict(doc.data), doc.source


def trace_hint(path: str | Path) -> str:
    """Where to get a known public trace that is missing (``traces/index.yaml``), or ""."""
    index = preset_dir("traces") / "index.yaml"
    if not index.is_file():
        return ""
    entry = (read_yaml(index).data or {}).get(Path(path).name)
    if not isinstance(entry, dict):
        return ""
    return (f" ({entry.get('title', Path(path).name)}: download it from "
            f"{entry.get('url')} and give its path)")
