"""Every L3 backend keeps the same contract: positional batches, no rewrite, None for misses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_backend.l3 import FileL3, L3Client

PAGE = 64 << 10  # 64 KiB pages


def _pages(n: int) -> list[bytes]:
    return [os.urandom(PAGE) for _ in range(n)]


@pytest.fixture(params=["file", pytest.param("mooncake", marks=pytest.mark.mooncake)])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[L3Client]:
    if request.param == "file":
        c = FileL3(tmp_path / "l3")
        yield c
        c.close()
    else:  # shared per module; fresh keys keep tests apart
        yield request.getfixturevalue("mooncake_l3")


def test_backend_satisfies_the_protocol(client: L3Client) -> None:
    assert isinstance(client, L3Client)


def test_set_then_get_returns_the_same_bytes(client: L3Client, keys: list[str]) -> None:
    values = _pages(len(keys))
    assert client.batch_set(keys, values) == [True] * len(keys)
    assert client.batch_get(keys) == values


def test_exists_answers_each_key_in_order(client: L3Client, keys: list[str]) -> None:
    assert client.batch_exists(keys) == [False] * len(keys)
    client.batch_set(keys[::2], _pages(len(keys[::2])))
    assert client.batch_exists(keys) == [i % 2 == 0 for i in range(len(keys))]


def test_a_missing_key_reads_none_next_to_stored_ones(client: L3Client, keys: list[str]) -> None:
    stored, missing = keys[0], keys[1]
    [value] = _pages(1)
    client.batch_set([stored], [value])
    assert client.batch_get([missing, stored, missing]) == [None, value, None]


def test_an_existing_key_keeps_its_first_value(client: L3Client, keys: list[str]) -> None:
    first, second = _pages(2)
    assert client.batch_set(keys[:1], [first]) == [True]
    assert client.batch_set(keys[:2], [second, second]) == [True, True]  # reported stored
    assert client.batch_get(keys[:2]) == [first, second]


def test_empty_batches_are_empty(client: L3Client) -> None:
    assert client.batch_exists([]) == []
    assert client.batch_get([]) == []
    assert client.batch_set([], []) == []


def test_bad_input_is_rejected_before_storing(client: L3Client, keys: list[str]) -> None:
    with pytest.raises(ValueError, match="empty value"):
        client.batch_set(keys[:1], [b""])
    with pytest.raises(ValueError, match="values"):
        client.batch_set(keys[:2], _pages(1))
    with pytest.raises(ValueError, match="invalid L3 key"):
        client.batch_get(["../etc/passwd"])
    assert client.batch_exists(keys[:2]) == [False, False]


def test_remove_drops_a_key_so_that_it_can_be_stored_again(client: L3Client,
                                                           keys: list[str]) -> None:
    first, second = _pages(2)
    client.batch_set(keys[:1], [first])
    assert client.batch_remove(keys[:2]) == [True, True]  # absent afterwards, either way
    assert client.batch_exists(keys[:1]) == [False]
    assert client.batch_set(keys[:1], [second]) == [True]
    assert client.batch_get(keys[:1]) == [second]
