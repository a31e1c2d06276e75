"""FileL3 specifics: fan-out layout, atomic writes, capacity limit, reopening a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_backend.l3 import FileL3

KEY = "ab" + "0" * 62


def test_each_key_is_one_file_under_a_two_char_fanout_dir(tmp_path: Path) -> None:
    FileL3(tmp_path).batch_set([KEY], [b"page"])
    assert (tmp_path / "ab" / KEY).read_bytes() == b"page"


def test_no_temporary_files_are_left_behind(tmp_path: Path) -> None:
    l3 = FileL3(tmp_path)
    l3.batch_set([KEY, KEY], [b"one", b"two"])  # duplicate key in one batch: first wins
    assert [p.name for p in (tmp_path / "ab").iterdir()] == [KEY]
    assert l3.batch_get([KEY]) == [b"one"]


def test_writes_beyond_capacity_are_refused_not_evicted(tmp_path: Path) -> None:
    l3 = FileL3(tmp_path, capacity_bytes=10)
    keys = [f"{i:064x}" for i in range(3)]
    assert l3.batch_set(keys, [b"1234", b"5678", b"9abc"]) == [True, True, False]
    assert l3.used_bytes == 8
    assert l3.batch_exists(keys) == [True, True, False]


def test_reopening_a_directory_sees_its_pages_and_their_size(tmp_path: Path) -> None:
    FileL3(tmp_path).batch_set([KEY], [b"x" * 100])
    again = FileL3(tmp_path, capacity_bytes=150)
    assert again.used_bytes == 100
    assert again.batch_get([KEY]) == [b"x" * 100]
    assert again.batch_set(["cd" + "0" * 62], [b"y" * 60]) == [False]


def test_a_closed_client_refuses_work(tmp_path: Path) -> None:
    l3 = FileL3(tmp_path)
    l3.close()
    with pytest.raises(RuntimeError, match="closed"):
        l3.batch_exists([KEY])
