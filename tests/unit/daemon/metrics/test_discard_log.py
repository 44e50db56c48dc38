"""The discard log: one JSON line per message, rotated by size with a bounded archive."""

from __future__ import annotations

import json
from pathlib import Path

from pulsar_bruce.batch.batch_builder import BatchBuilder, encode_key_field
from pulsar_bruce.metrics.discard_log import DiscardLog
from to_pulsar.encoding import encode_any_partition


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
