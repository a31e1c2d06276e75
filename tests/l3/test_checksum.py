"""Checksummed pages: every way a stored page can go bad is caught, counted and removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_backend.l3 import FileL3, guard
from gpu_backend.l3.checksum import HEADER, CorruptPage, seal, unseal

KEY = "ab" + "0" * 62
OTHER = "cd" + "0" * 62
PAYLOAD = os.urandom(4096)


def test_round_trip_returns_the_payload_without_copying() -> None:
    blob = seal(KEY, PAYLOAD)
    assert len(blob) == HEADER.size + len(PAYLOAD)
    view = unseal(KEY, blob)
    assert isinstance(view, memoryview) and bytes(view) == PAYLOAD


@pytest.mark.parametrize("offset", [0, 5, HEADER.size - 1, HEADER.size, HEADER.size + 2000, -1])
def test_one_flipped_bit_anywhere_is_caught(offset: int) -> None:
    blob = bytearray(seal(KEY, PAYLOAD))
    blob[offset] ^= 0x01
    with pytest.raises(CorruptPage):
        unseal(KEY, bytes(blob))


@pytest.mark.parametrize("blob, why", [
    (b"\xff" * (HEADER.size + 4096), "magic"),
    (b"", "shorter than"),
    (seal(KEY, PAYLOAD)[:-100], "truncated"),
    (seal(OTHER, PAYLOAD), "checksum"),  # a good page filed under another key
])
def test_bad_pages_say_why(blob: bytes, why: str) -> None:
    with pytest.raises(CorruptPage, match=why):
        unseal(KEY, blob)


def test_a_page_of_another_size_is_refused() -> None:
    with pytest.raises(CorruptPage, match="another model shape"):
        unseal(KEY, seal(KEY, PAYLOAD), expect_bytes=len(PAYLOAD) * 2)


def _page_file(root: Path, key: str) -> Path:
    return root / key[:2] / key


@pytest.mark.parametrize("damage", ["flip", "ff", "truncate", "empty"])
def test_a_damaged_file_page_is_a_counted_miss_and_is_replaced(tmp_path: Path,
                                                                damage: str) -> None:
    l3 = guard(FileL3(tmp_path))
    assert l3.batch_set([KEY, OTHER], [PAYLOAD, PAYLOAD]) == [True, True]
    path = _page_file(tmp_path, KEY)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[HEADER.size + 100] ^= 0x10
    elif damage == "ff":
        raw = bytearray(b"\xff" * len(raw))
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    got = l3.batch_get([KEY, OTHER])
    assert got[0] is None and bytes(got[1]) == PAYLOAD
    assert l3.faults.as_dict()["l3_checksum_failures"] == 1
    assert not path.exists()  # removed, so that the next store writes a good copy
    assert l3.batch_exists([KEY]) == [False]
    assert l3.batch_set([KEY], [PAYLOAD]) == [True]
    assert bytes(l3.batch_get([KEY])[0]) == PAYLOAD
