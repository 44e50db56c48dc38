"""The discard log: one JSON line per message, rotated by size with a bounded archive."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pulsar_bruce.batch.batch_builder import BatchBuilder, encode_key_field
from pulsar_bruce.metrics.discard_log import DiscardLog
from to_pulsar.encoding import encode_any_partition, encode_message_record, encode_partition_key


def test_batch_messages_are_logged_one_line_each(tmp_path: Path) -> None:
    log = DiscardLog(str(tmp_path / "d.log"), max_bytes=10**6, archives=1, value_prefix=4)
    builder = BatchBuilder()
    for key, value in ((b"k1", b"value-one"), (b"", b"value-two")):
        data = b"xx" + value
        builder.append(encode_key_field(key), 1700000000000, data, 2, 64)
    log.batch("shutdown", "persistent://public/default/t", builder.seal())
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "d.log").read_text().splitlines()]
    assert [(x["reason"], x.get("key"), x["value_size"]) for x in lines] == [
        ("shutdown", "k1", 9),
        ("shutdown", "", 9),
    ]
    assert lines[0]["value_b64_prefix"] == "dmFsdQ=="  # b"valu"


def test_rotation_keeps_a_bounded_number_of_archives(tmp_path: Path) -> None:
    path = tmp_path / "d.log"
    log = DiscardLog(str(path), max_bytes=400, archives=2)
    for i in range(100):
        log.datagram("buffer_full", encode_any_partition("t", b"m%d" % i))
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["d.log", "d.log.1", "d.log.2"]
    assert all(p.stat().st_size <= 600 for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "encode",
    [
        lambda value: encode_any_partition("acme/shop/orders", value, key=b"o-17"),
        lambda value: encode_partition_key(3, "acme/shop/orders", value, key=b"o-17"),
        lambda value: encode_message_record(
            "acme/shop/orders", value, key=b"o-17", properties={"a": "b"}, deliver_after_ms=5
        ),
    ],
    ids=["any_partition", "partition_key", "message"],
)
def test_a_record_known_by_its_first_bytes_is_logged_with_its_topic_and_real_size(
    tmp_path: Path, encode: Callable[[bytes], bytes]
) -> None:
    """A stream record skipped as it arrived (too large): the log has only its first
    bytes, yet names its topic and key and gives the value's whole size."""
    record = encode(b"v" * 70_000)
    log = DiscardLog(str(tmp_path / "d.log"), max_bytes=10**6, archives=1, value_prefix=3)
    log.datagram("too_large", record[:200], len(record))
    log.datagram("too_large", b"\x00\x00\x10\x00\x09\x09garbage", 4096)
    log.close()
    first, second = [json.loads(x) for x in (tmp_path / "d.log").read_text().splitlines()]
    assert (first["topic"], first["key"], first["value_size"]) == (
        "acme/shop/orders",
        "o-17",
        70_000,
    )
    assert first["value_b64_prefix"] == "dnZ2"  # b"vvv"
    assert (second["topic"], second["value_size"]) == (None, 4096)
