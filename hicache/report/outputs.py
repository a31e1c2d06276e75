"""Output folders that cannot lie: a run's files appear together, complete, or not at all.

    with RunFolder(Path("results/quick"), overwrite=False) as run:   # checks, before work
        write_things(run.path)          # a hidden sibling: results/.quick.partial-<pid>
        run.commit(manifest)            # writes run.json last, then renames into place

Invariants:
- the final folder only ever holds one complete run: the files are written into a hidden
  temporary sibling (same file system) that is renamed into place by :meth:`commit`, after
  ``run.json`` (the manifest, which marks a complete hicache-lab output) is written;
- an existing non-empty folder is refused unless ``overwrite``; even then only a previous
  hicache-lab output (its ``run.json`` names the command that wrote it) is replaced, never
  an arbitrary folder (nor a measured run's folder, whose ``run.json`` is another file);
- writability is checked when the folder is opened, before any simulation;
- any exception (KeyboardInterrupt included) inside the ``with`` removes the temporary
  folder and leaves the final one as it was.
:func:`safe_names` gives every variant a distinct folder name that cannot leave the run.
:class:`OutputFile` is the same for a command whose output is one file (a profile).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

MANIFEST = "run.json"
MARK = {"output": "hicache-lab"}  # first key of every manifest: whose run.json this is
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+=-]+")


class OutputError(ValueError):
    """An output folder we must not or cannot write; the message names the folder."""


def safe_name(name: str) -> str:
    """A file-name-safe form of ``name``: runs of other characters become ``_``; leading
    dots go (no ``..``, no hidden files); empty becomes ``_``."""
    return _UNSAFE.sub("_", str(name)).lstrip(".") or "_"


def safe_names(names: Iterable[str]) -> dict[str, str]:
    """``{name: folder}`` with distinct folders: a name whose safe form is taken gets
    ``-2``, ``-3``, ... (``L1 L2`` and ``L1_L2`` never share a folder)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        base = safe_name(name)
        folder, i = base, 1
        while folder.lower() in taken:  # case-insensitive file systems too
            i += 1
            folder = f"{base}-{i}"
        taken.add(folder.lower())
        out[name] = folder
    return out


def is_output(folder: Path) -> bool:
    """Whether ``folder`` holds a complete hicache-lab output: its ``run.json`` is a
    manifest (:data:`MARK`, or the ``command`` key older versions wrote)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and (data.get("output") == MARK["output"]
                                       or "command" in data)


class RunFolder:
    """A temporary folder that becomes ``final`` on :meth:`commit` (see module docstring)."""

    def __init__(self, final: Path, *, overwrite: bool = False) -> None:
        self.final = Path(final)
        self.overwrite = overwrite
        self._check_target()
        parent = self.final.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.path = parent / f".{self.final.name}.partial-{os.getpid()}"
            if self.path.exists():
                shutil.rmtree(self.path)
            self.path.mkdir()
            probe = self.path / ".write-test"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as e:
            raise OutputError(f"--out {self.final}: cannot write there "
                              f"({e.strerror or e})") from None
        self.committed = False

    def _check_target(self) -> None:
        f = self.final
        if f.exists() and not f.is_dir():
            raise OutputError(f"--out {f}: exists and is not a folder")
        if f.is_dir() and any(f.iterdir()):
            ours = is_output(f)
            if not self.overwrite:
                what = "a previous run" if ours else "other files"
                raise OutputError(f"--out {f}: already holds {what}; pass --overwrite to "
                                  "replace it, or choose another --out")
            if not ours:
                raise OutputError(f"--out {f}: not a hicache-lab output (no {MANIFEST} of "
                                  "a run); refusing to replace it even with --overwrite")

    def commit(self, manifest: dict[str, Any]) -> Path:
        """Write ``run.json`` last, then move the folder into place; returns ``final``."""
        text = json.dumps({**MARK, **manifest}, indent=2, default=str) + "\n"
        (self.path / MANIFEST).write_text(text)
        old = None
        if self.final.is_dir() and any(self.final.iterdir()):
            self._check_target()  # still only a previous output (it may have changed)
            old = self.final.with_name(f".{self.final.name}.old-{os.getpid()}")
            os.replace(self.final, old)
        os.replace(self.path, self.final)  # rename(2) also replaces an empty folder
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.committed = True
        return self.final

    def abort(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self.committed:
            self.abort()


class OutputFile:
    """One output file, whole or absent: checked when opened (not a folder, not an existing
    file unless ``overwrite``, its folder writable), written to a hidden sibling and renamed
    into place by :meth:`write_text`, so an interrupted command leaves the old file or none.

        out = OutputFile(Path("profile.yaml"), overwrite=False)   # before the work
        out.write_text(render(measure()))
    """

    def __init__(self, final: Path, *, overwrite: bool = False, flag: str = "--out") -> None:
        self.final, self.flag = Path(final), flag
        if self.final.is_dir():
            raise OutputError(f"{flag} {self.final}: is a folder; give a file name")
        if self.final.exists() and not overwrite:
            raise OutputError(f"{flag} {self.final}: already exists; pass --overwrite to "
                              "replace it, or choose another file")
        self._tmp = self.final.with_name(f".{self.final.name}.partial-{os.getpid()}")
        try:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self._tmp.write_bytes(b"")
            self._tmp.unlink()
        except OSError as e:
            raise OutputError(f"{flag} {self.final}: cannot write there "
                              f"({e.strerror or e})") from None

    def write_text(self, text: str) -> Path:
        try:
            self._tmp.write_text(text)
            os.replace(self._tmp, self.final)
        except BaseException:
            self._tmp.unlink(missing_ok=True)
            raise
        return self.final
