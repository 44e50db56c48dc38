"""The benches' values: exact sizes, the same every run, JSON-like ones that compress."""

from __future__ import annotations

import json

import lz4.block
import pytest

from bench.payloads import STAMP, paced, payload_pool, stamped_values


@pytest.mark.parametrize("kind", ["random", "json"])
@pytest.mark.parametrize("size", [84, 184, 1000, 10_000])
def test_every_value_has_the_size_asked_and_the_pool_is_seeded(kind: str, size: int) -> None:
    pool = payload_pool(size, kind, seed=3, count=100)
    assert len(pool) == len(set(pool)) == 100
    assert {len(value) for value in pool} == {size}
    assert pool == payload_pool(size, kind, seed=3, count=100)
    assert pool != payload_pool(size, kind, seed=4, count=100)


def test_a_value_too_small_for_the_fields_is_cut_to_its_size() -> None:
    assert {len(value) for value in payload_pool(20, "json", count=10)} == {20}


def test_json_values_parse_and_compress_as_records_do() -> None:
    pool = payload_pool(1000, "json", count=128)
    record = json.loads(pool[0])
    assert {"ts", "event", "svc", "host", "user", "req", "status", "ms", "msg"} <= set(record)
    batch = b"".join(pool)
    kept = len(lz4.block.compress(batch, store_size=False)) / len(batch)
    assert 0.2 < kept < 0.6  # realistic: neither random (1.0) nor one repeated string
    noise = b"".join(payload_pool(1000, "random", count=128))
    assert len(lz4.block.compress(noise, store_size=False)) > len(noise) * 0.99


def test_stamped_values_carry_send_time_and_numbers_from_the_base() -> None:
    params = {"size": 200, "rate": 1e9, "messages": 5, "seq_base": 40, "payload": "json"}
    values = list(stamped_values(params))
    assert [STAMP.unpack_from(v)[1] for v in values] == [40, 41, 42, 43, 44]
    assert {len(v) for v in values} == {200}


def test_paced_yields_every_index_once_in_order() -> None:
    assert list(paced(1e9, 7)) == list(range(7))
