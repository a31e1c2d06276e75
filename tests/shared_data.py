"""Where the tests find the data they share with the project's other checkouts: the
Mooncake traces (``traces/mooncake/``) and the SGLang oracle's fixtures.

No machine path: the folder is found, first match wins, at

1. ``$HICACHE_SHARED`` (the folder itself), when set: any layout;
2. ``shared/`` beside this repository: CI's layout and a developer's checkout;
3. ``shared/`` beside the main checkout, when this is a linked worktree of it
   (``git worktree add``);
4. ``shared/`` beside the repository this one was cloned from, when its ``origin`` is a
   folder on this machine: a fresh clone made for a check (``git clone CHECKOUT``).

When none holds it, :data:`SHARED` is the first candidate that does not exist and the
tests that need a file in it skip, naming ``HICACHE_SHARED`` (:func:`skip_reason`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "HICACHE_SHARED"


def _git(root: Path, *args: str) -> str:
    """``git -C root ARGS``'s output, stripped; "" when git is absent or fails."""
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _main_checkout_sibling(root: Path) -> Path | None:
    """``shared/`` beside the main checkout whose ``.git`` ``root`` shares, else None."""
    common = _git(root, "rev-parse", "--path-format=absolute", "--git-common-dir")
    if not common:
        return None
    return Path(common).parent.parent / "shared"


def _origin_sibling(root: Path) -> Path | None:
    """``shared/`` beside ``root``'s ``origin`` when that is a local folder, else None."""
    url = _git(root, "config", "--get", "remote.origin.url")
    if url.startswith("file://"):
        url = url[len("file://"):]
    if not url or "://" in url or not Path(url).is_absolute():
        return None  # a remote (or relative) origin: nothing on this machine
    return Path(url).resolve().parent / "shared"


def candidates(root: Path = ROOT, environ: dict[str, str] | None = None) -> list[Path]:
    """The folders tried, in order (module doc)."""
    env = os.environ if environ is None else environ
    found = [Path(env[ENV])] if env.get(ENV) else []
    found.append(root.parent / "shared")
    for sibling in (_main_checkout_sibling(root), _origin_sibling(root)):
        if sibling is not None and sibling not in found:
            found.append(sibling)
    return found


def find_shared(root: Path = ROOT, environ: dict[str, str] | None = None) -> Path:
    """The first of :func:`candidates` that is a folder, else the first candidate."""
    tried = candidates(root, environ)
    return next((p for p in tried if p.is_dir()), tried[0])


SHARED = find_shared()
TRACES = SHARED / "traces" / "mooncake"
CONVERSATION_TRACE = TRACES / "mooncake_conversation_trace.jsonl"
SYNTHETIC_TRACE = TRACES / "mooncake_synthetic_trace.jsonl"


def skip_reason(path: Path) -> str:
    """Why a test that reads ``path`` skips: it is absent, and how to point at it."""
    return f"{path} absent: set {ENV} to the folder holding traces/mooncake/"
