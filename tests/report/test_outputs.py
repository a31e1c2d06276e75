"""Output folders: safe distinct names, complete-or-absent runs, no mixing, no clobbering."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hicache.report.outputs import MANIFEST, OutputError, RunFolder, safe_name, safe_names


@pytest.mark.parametrize("name, safe", [
    ("..", "_"), ("../x", "_x"), (".hidden", "hidden"), ("L1+L2+L3", "L1+L2+L3"),
    ("a/b\\c", "a_b_c"), ("", "_"), ("L1 L2", "L1_L2"),
])  # fmt: skip
def test_a_name_cannot_leave_the_run_folder_or_hide(name: str, safe: str) -> None:
    assert safe_name(name) == safe
    assert "/" not in safe and not safe.startswith(".")


def test_names_that_clean_to_the_same_folder_get_distinct_folders() -> None:
    folders = safe_names(["L1 L2", "L1_L2", "l1_l2", "L1+L2"])
    assert len(set(folders.values())) == 4
    assert {f.lower() for f in folders.values()} == {"l1_l2", "l1_l2-2", "l1_l2-3", "l1+l2"}


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_run_appears_only_when_committed_and_the_manifest_is_there(tmp_path) -> None:
    final = tmp_path / "out"
    with RunFolder(final) as run:
        (run.path / "summary.json").write_text("{}")
        assert not final.exists()  # nothing complete-looking yet
        run.commit({"command": "test"})
    assert _files(final) == {"summary.json", MANIFEST}
    assert _files(tmp_path) == {"out", "out/summary.json", f"out/{MANIFEST}"}


def test_an_interrupted_run_leaves_nothing_behind(tmp_path) -> None:
    final = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt), RunFolder(final) as run:
        (run.path / "trace.json").write_text("[")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_an_existing_run_is_refused_unless_overwrite_and_replaced_whole(tmp_path) -> None:
    final = tmp_path / "out"
    with RunFolder(final) as run:
        (run.path / "old.csv").write_text("x")
        run.commit({})
    with pytest.raises(OutputError, match="already holds a previous run; pass --overwrite"):
        RunFolder(final)
    with RunFolder(final, overwrite=True) as run:
        (run.path / "new.csv").write_text("y")
        run.commit({})
    assert _files(final) == {"new.csv", MANIFEST}  # never a mix of two runs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_folder_that_is_not_a_run_is_never_replaced(tmp_path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(OutputError, match="other files"):
        RunFolder(tmp_path)
    with pytest.raises(OutputError, match="not a hicache-lab output"):
        RunFolder(tmp_path, overwrite=True)
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    with RunFolder(tmp_path / "empty_ok") as run:  # an empty folder is fine
        run.commit({})


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_place_is_found_when_opening(tmp_path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(OutputError, match="cannot write there"):
        RunFolder(locked / "out")


def test_a_path_under_a_file_is_found_when_opening(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="cannot write there"):
        RunFolder(tmp_path / "file" / "out")
    with pytest.raises(OutputError, match="not a folder"):
        RunFolder(tmp_path / "file")
