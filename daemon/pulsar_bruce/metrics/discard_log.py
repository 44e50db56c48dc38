"""The discard log: evidence, one JSON line per message given up or possibly duplicated.

Like Bruce's discard reports, it tells an operator *which* messages were
lost and why: time, reason, topic, key and a base64 prefix of the value.  It
is off by default; when on, it costs nothing on the path of messages that are
delivered.  Files rotate by size and keep a bounded number of archives.
"""

from __future__ import annotations

import base64
import json
import logging
import logging.handlers
import struct
import time

from pulsar_bruce.batch.batch_builder import batch_entries_of
from pulsar_bruce.config import Config
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.parse.datagram import (
    API_KEY_ANY_PARTITION,
    API_KEY_MESSAGE,
    API_KEY_PARTITION_KEY,
    parse_datagram,
)

_U32 = struct.Struct(">I")


class DiscardLog:
    """Writes discard and possible-duplicate lines to a size-rotated file."""

    def __init__(self, path: str, max_bytes: int, archives: int, value_prefix: int = 64):
        self._logger = logging.Logger("pulsar_bruce.discards")  # not the root's handlers
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=archives, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger.addHandler(handler)
        self._handler = handler
        self.value_prefix = value_prefix

    def datagram(self, reason: str, data: bytes, size: int | None = None) -> None:
        """A datagram that never became a message (or was refused on the way in);
        ``size``: the whole record's, when ``data`` is only its first bytes (a stream
        record skipped as it arrived)."""
        if size is not None:
            fields = head_fields(data, size)
            if fields is None:
                self._write(reason, None, None, data, size)
            else:
                topic, key, value_offset = fields
                self._write(reason, topic, key, data[value_offset:], size - value_offset)
            return
        parsed = parse_datagram(data)
        if isinstance(parsed, str):
            self._write(reason, None, None, data)
            return
        topic_bytes, _, _, key, value_offset, _ = parsed
        self._write(reason, topic_bytes.decode("utf-8", "replace"), key, data[value_offset:])

    def batch(self, reason: str, topic: str, batch: SealedBatch) -> None:
        """Every message of a batch given up (``reason``) or resent (``possible_duplicate``)."""
        raw = batch.payload if batch.payload or not batch.frame else batch_entries_of(batch)
        offset = 0
        while offset < len(raw):
            (size,) = _U32.unpack_from(raw, offset)
            metadata = pb.SingleMessageMetadata.FromString(raw[offset + 4 : offset + 4 + size])
            start = offset + 4 + size
            value = raw[start : start + metadata.payload_size]
            key = metadata.partition_key.encode() if metadata.HasField("partition_key") else b""
            if metadata.partition_key_b64_encoded:
                key = base64.b64decode(key)
            self._write(reason, topic, key, value)
            offset = start + metadata.payload_size

    def _write(
        self,
        reason: str,
        topic: str | None,
        key: bytes | None,
        value: bytes,
        value_size: int | None = None,
    ) -> None:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z",
            "reason": reason,
            "topic": topic,
        }
        if key is not None:
            try:
                line["key"] = key.decode("utf-8")
            except UnicodeDecodeError:
                line["key_b64"] = base64.b64encode(key).decode()
        line["value_size"] = len(value) if value_size is None else value_size
        line["value_b64_prefix"] = base64.b64encode(value[: self.value_prefix]).decode()
        self._logger.warning("%s", json.dumps(line, separators=(",", ":")))

    def close(self) -> None:
        self._handler.close()


def head_fields(head: bytes, size: int) -> tuple[str, bytes, int] | None:
    """(topic, key, value offset) of a message record of ``size`` bytes from its first
    bytes ``head`` (Bruce's layouts and ours, ``parse/datagram.py``); None when they do
    not hold that much or are no such record."""
    try:
        (api_key,) = struct.unpack_from(">h", head, 4)
        (flags,) = struct.unpack_from(">h", head, 8)
        if api_key == API_KEY_ANY_PARTITION:
            topic_at = 10
        elif api_key in (API_KEY_PARTITION_KEY, API_KEY_MESSAGE):
            topic_at = 14
        else:
            return None
        (topic_size,) = struct.unpack_from(">h", head, topic_at)
        topic_end = topic_at + 2 + topic_size
        delay = 8 if api_key == API_KEY_MESSAGE and flags & 0x0006 else 0
        (key_size,) = struct.unpack_from(">i", head, topic_end + 8 + delay)
        key_start = topic_end + 12 + delay
        offset = key_start + key_size
        if api_key == API_KEY_MESSAGE:
            (count,) = struct.unpack_from(">h", head, offset)
            offset += 2
            for _ in range(count):
                (name_size,) = struct.unpack_from(">h", head, offset)
                (value_size,) = struct.unpack_from(">i", head, offset + 2 + name_size)
                offset += 6 + name_size + value_size
        struct.unpack_from(">i", head, offset)  # the value's size field is there
    except struct.error:
        return None
    if topic_size <= 0 or key_size < 0 or offset + 4 > size:
        return None
    topic = head[topic_at + 2 : topic_end].decode("utf-8", "replace")
    return topic, head[key_start : key_start + key_size], offset + 4


def discard_log_of(config: Config) -> DiscardLog | None:
    """The ``--discard-log`` writer, or None when it is off."""
    if not config.discard_log:
        return None
    return DiscardLog(config.discard_log, config.discard_log_max_bytes, config.discard_log_archives)
