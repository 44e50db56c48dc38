"""What the fake broker records and how it reads a Send's batch (``fakebroker.py``)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pulsar_bruce.batch.compression import decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame

_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class LookupAnswer:
    """How the fake answers one LookupTopic.  ``broker_url`` None means this broker."""

    broker_url: str | None = None
    redirect: bool = False
    authoritative: bool = True
    proxy_through_service_url: bool = False

    @classmethod
    def redirect_to(cls, url: str, authoritative: bool = True) -> LookupAnswer:
        return cls(url, redirect=True, authoritative=authoritative)


@dataclass(frozen=True)
class Lookup:
    conn: int
    topic: str
    authoritative: bool
    listener: str | None = None  # advertised_listener_name, when the client sent one


@dataclass(frozen=True)
class ProducerRequest:
    conn: int
    topic: str
    producer_id: int
    requested_name: str | None  # what the client asked for (None: let the broker pick)
    assigned_name: str


@dataclass(frozen=True)
class Sent:
    """One Send frame (a batch) as received."""

    conn: int
    topic: str
    producer_name: str
    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    values: tuple[bytes, ...]
    #: "sent", "held", "swallowed", "wrong", "error", "duplicate" (deduplication: a receipt
    #: for message id -1:-1) or "unknown" (deduplication: pushed, not persisted yet).
    receipt: str
    #: The ServerError answered (``receipt`` "error" or "unknown") and the sequence id it named.
    error: int | None = None
    error_sequence_id: int | None = None


@dataclass(frozen=True)
class Message:
    """One message out of a batch; ``sequence_id`` is the batch's plus its index."""

    conn: int
    topic: str
    producer_name: str
    sequence_id: int
    value: bytes
    key: str


def decode_batch(frame: Frame) -> list[tuple[str, bytes]]:
    """``(key, value)`` of every entry ``[u32 size][SingleMessageMetadata][value]``."""
    md = frame.metadata
    assert md is not None, "Send without a payload section"
    data = decompress(md.compression, frame.payload, md.uncompressed_size)
    entries = []
    offset = 0
    for _ in range(md.num_messages_in_batch):
        (size,) = _U32.unpack_from(data, offset)
        single = pb.SingleMessageMetadata()
        single.ParseFromString(data[offset + 4 : offset + 4 + size])
        start = offset + 4 + size
        entries.append((single.partition_key, data[start : start + single.payload_size]))
        offset = start + single.payload_size
    assert offset == len(data), f"{len(data) - offset} bytes left after the batch entries"
    return entries


def decode_entries(frame: Frame) -> list[tuple[str, bytes]]:
    """``(key, value)`` of a Send's messages: a batch's entries (:func:`decode_batch`), a
    non-batched message, or one chunk's part of a chunked message's payload, as it is."""
    md = frame.metadata
    assert md is not None, "Send without a payload section"
    if md.HasField("num_messages_in_batch"):
        return decode_batch(frame)
    if frame.command.send.is_chunk:
        return [(md.partition_key, frame.payload)]
    return [(md.partition_key, decompress(md.compression, frame.payload, md.uncompressed_size))]


def stored_messages(
    conn: int, topic: str, frame: Frame, chunks: dict[str, dict[int, bytes]]
) -> list[Message]:
    """The messages a stored Send adds: its entries, or for a chunk, once the last one
    is stored and every chunk is there, the whole message.  ``chunks``: uuid -> the
    chunks stored so far, by chunk id (kept between calls)."""
    md = frame.metadata
    assert md is not None
    entries = decode_entries(frame)
    if frame.command.send.is_chunk:
        parts = chunks.setdefault(md.uuid, {})
        parts[md.chunk_id] = entries[0][1]
        last = md.num_chunks_from_msg - 1
        if md.chunk_id != last or sorted(parts) != list(range(last + 1)):
            return []
        del chunks[md.uuid]
        payload = b"".join(parts[i] for i in range(last + 1))
        entries = [(md.partition_key, decompress(md.compression, payload, md.uncompressed_size))]
    return [
        Message(conn, topic, md.producer_name, md.sequence_id + i, value, key)
        for i, (key, value) in enumerate(entries)
    ]


@dataclass(frozen=True)
class Credentials:
    """Credentials a client presented: in Connect or in an AuthResponse."""

    conn: int
    method: str
    data: bytes
    how: str  # "connect" or "auth_response"


def copy_message(message: Any) -> Any:
    copy = type(message)()
    copy.CopyFrom(message)
    return copy
