"""No machine path in what the repository ships: code, tests, data and docs name files
relative to the repository (or find shared data with :mod:`tests.shared_data`), never
under a workplace or home folder, so a clone runs anywhere."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests import shared_data
from tests.shared_data import ENV, candidates, find_shared, skip_reason

ROOT = Path(__file__).resolve().parents[2]
# a path below a workplace or home folder (a folder name after it: the guards that look
# for the bare prefix, like this one, do not match)
MACHINE_PATH = re.compile(r"/(?:work|root|home|Users)/[\w.-]")
TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".ipynb", ".json", ".cfg", ".txt"}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.stdout.splitlines()]


def test_no_tracked_text_file_names_a_machine_path() -> None:
    found = []
    for path in _tracked():
        if path.suffix not in TEXT or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "machine paths:\n" + "\n".join(found)


def test_the_environment_variable_wins(tmp_path: Path) -> None:
    mine = tmp_path / "elsewhere"
    mine.mkdir()
    (tmp_path / "shared").mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    assert find_shared(root, {ENV: str(mine)}) == mine
    assert find_shared(root, {}) == tmp_path / "shared"  # then the repository's sibling


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _checkout_beside_shared(top: Path) -> Path:
    """A git checkout ``top/main`` with one commit, and ``top/shared`` beside it."""
    main = top / "main"
    main.mkdir(parents=True)
    (top / "shared").mkdir()
    _git("-C", str(main), "init", "-q")
    _git("-C", str(main), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q",
         "--allow-empty", "-m", "x")
    return main


def test_a_clone_finds_the_folder_beside_its_origin(tmp_path: Path) -> None:
    origin = _checkout_beside_shared(tmp_path / "work")
    clone = tmp_path / "elsewhere" / "clone"
    _git("clone", "-q", str(origin), str(clone))
    assert find_shared(clone, {}) == tmp_path / "work" / "shared"


def test_a_linked_worktree_finds_the_folder_beside_its_main_checkout(tmp_path: Path) -> None:
    main = _checkout_beside_shared(tmp_path / "work")
    tree = tmp_path / "trees" / "mine"
    _git("-C", str(main), "worktree", "add", "-q", "-b", "mine", str(tree))
    assert find_shared(tree, {}) == tmp_path / "work" / "shared"


def test_with_no_folder_the_tests_skip_naming_the_variable(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    shared = find_shared(root, {})
    assert not shared.exists() and shared == candidates(root, {})[0]
    assert ENV in skip_reason(shared / "x.jsonl")


def test_the_module_resolves_the_traces_under_its_folder() -> None:
    assert shared_data.CONVERSATION_TRACE.parent == shared_data.TRACES
    assert shared_data.TRACES == shared_data.SHARED / "traces" / "mooncake"
