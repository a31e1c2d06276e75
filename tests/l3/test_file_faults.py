"""FileL3 under I/O faults: every one is a miss or a failed store, per key, never a crash."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from gpu_backend.l3 import FileL3, L3PartialError, guard

KEYS = [f"{i:02x}" + "0" * 62 for i in range(4)]
PAGE = b"p" * 1000


def _stored(tmp_path: Path) -> FileL3:
    l3 = FileL3(tmp_path / "l3")
    assert l3.batch_set(KEYS, [PAGE] * 4) == [True] * 4
    return l3


def test_an_unreadable_page_fails_alone(tmp_path: Path) -> None:
    l3 = _stored(tmp_path)
    bad = tmp_path / "l3" / KEYS[1][:2] / KEYS[1]
    bad.unlink()
    bad.mkdir()  # reading it now raises IsADirectoryError
    with pytest.raises(L3PartialError) as info:
        l3.batch_get(KEYS)
    assert info.value.results == [PAGE, None, PAGE, PAGE]
    assert list(info.value.errors) == [1] and isinstance(info.value.errors[1], OSError)


def test_a_removed_directory_makes_misses_and_failed_stores(tmp_path: Path) -> None:
    l3 = _stored(tmp_path)
    shutil.rmtree(tmp_path / "l3")
    assert l3.batch_exists(KEYS) == [False] * 4
    assert l3.batch_get(KEYS) == [None] * 4
    with pytest.raises(L3PartialError) as info:
        l3.batch_set(KEYS[:2], [PAGE] * 2)
    assert info.value.results == [False, False]
    assert not (tmp_path / "l3").exists()  # not recreated: it may be an unmounted volume


def test_a_read_only_store_fails_its_writes_and_keeps_its_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EROFS as a read-only mount raises it (root ignores chmod, so it is injected)."""
    inner = FileL3(tmp_path / "l3")
    g = guard(inner)
    assert g.batch_set(KEYS[:1], [PAGE]) == [True]
    used = inner.used_bytes

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert g.batch_set(KEYS[1:3], [PAGE] * 2) == [False, False]
    assert [bytes(v) for v in g.batch_get(KEYS[:1])] == [PAGE]
    assert g.faults.as_dict()["l3_errors"] == 2  # one per page that failed
    assert inner.used_bytes == used  # the refused writes reserved nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes through chmod")
def test_a_chmod_read_only_directory_fails_writes(tmp_path: Path) -> None:
    l3 = _stored(tmp_path)
    for d in (tmp_path / "l3").iterdir():
        d.chmod(0o555)
    try:
        with pytest.raises(L3PartialError):
            l3.batch_set(["00" + "1" * 62], [PAGE])
    finally:
        for d in (tmp_path / "l3").iterdir():
            d.chmod(0o755)


def test_through_the_guard_every_fault_is_a_counted_miss(tmp_path: Path) -> None:
    g = guard(FileL3(tmp_path / "l3"))
    assert g.batch_set(KEYS, [PAGE] * 4) == [True] * 4
    bad = tmp_path / "l3" / KEYS[2][:2] / KEYS[2]
    bad.unlink()
    bad.mkdir()
    got = g.batch_get(KEYS)
    assert [bytes(v) if v is not None else None for v in got] == [PAGE, PAGE, None, PAGE]
    assert g.faults.as_dict()["l3_errors"] == 1
    shutil.rmtree(tmp_path / "l3")
    assert g.batch_set(KEYS[:1], [PAGE]) == [False]
    assert g.batch_get(KEYS) == [None] * 4
    assert g.faults.as_dict()["l3_errors"] == 2
