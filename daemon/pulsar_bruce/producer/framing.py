"""A batch's Send frames, made once when it is first sent: compression, encryption, metadata.

Kept apart from :mod:`.partition_producer` (which decides *when* a batch is framed)
because this is the one place that decides *what* goes on the wire for a batch:
its sequence ids stamped on each entry (the ids themselves are the queue's:
``BatchQueue.assign`` gives them before framing, which only reads them), its
compression, its end-to-end encryption, and its metadata; or, for a batch of
one message that must go on its own (too large for a batch frame, or delayed),
a non-batched message, in chunks when it is larger than a frame.  Sans-IO.
"""

from __future__ import annotations

import struct
from typing import Protocol

from pulsar_bruce.batch.compression import CompressionTries, Compressor
from pulsar_bruce.batch.encryption import DataKey, Encryptor
from pulsar_bruce.batch.entries import first_key_of, stamp_sequence_ids
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.parse.deliver_at import take_deliver_at

#: Bytes a Send frame adds around the batch payload (command + metadata), generously.
SEND_FRAME_OVERHEAD = 1024
_U32 = struct.Struct(">I")


class FramingPolicy(Protocol):
    @property
    def compression(self) -> int: ...
    @property
    def compressor(self) -> Compressor | None: ...
    @property
    def encryptor(self) -> Encryptor | None: ...


class Framer(Protocol):
    """What of a :class:`~.partition_producer.PartitionProducer` framing reads (a batch's ids
    are stamped on it by the :class:`~.batch_queue.BatchQueue` first: framing reads them)."""

    producer_id: int
    name: str | None
    schema_version: bytes
    compression_tries: CompressionTries

    @property
    def policy(self) -> FramingPolicy: ...


def _compress(producer: Framer, raw: bytes) -> tuple[bytes, int]:
    """``raw`` compressed with the policy's codec (or not: see :class:`CompressionTries`)."""
    policy = producer.policy
    return producer.compression_tries.compress(raw, policy.compressor, policy.compression)


def _data_key(producer: Framer, now_ms: int) -> DataKey | None:
    encryptor = producer.policy.encryptor
    return None if encryptor is None else encryptor.data_key(now_ms)


def frame_batch(producer: Framer, batch: SealedBatch, publish_time_ms: int, limit: int) -> bool:
    """Give ``batch`` its Send frame (kept for resends) under the ids the queue gave it
    (``BatchQueue.assign``), each entry its own; False, the batch unchanged, when over
    ``limit`` bytes."""
    first_id = batch.sequence_id
    raw = stamp_sequence_ids(batch.payload, first_id, batch.count)
    payload, compression = _compress(producer, raw)
    data_key = _data_key(producer, publish_time_ms)
    if len(payload) + (data_key.overhead if data_key else 0) > limit:
        return False
    iv, payload = data_key.seal(payload) if data_key else (b"", payload)
    metadata = commands.batch_metadata(
        producer_name=producer.name or "",
        sequence_id=first_id,
        highest_sequence_id=batch.highest_sequence_id,
        publish_time_ms=publish_time_ms,
        num_messages=batch.count,
        compression=compression,
        uncompressed_size=len(raw),
        first_key=first_key_of(raw),
        schema_version=producer.schema_version,
        encryption_keys=data_key.keys if data_key else (),
        encryption_param=iv,
    )
    batch.frame = commands.send(
        producer_id=producer.producer_id,
        sequence_id=first_id,
        highest_sequence_id=batch.highest_sequence_id,
        num_messages=batch.count,
        metadata=metadata,
        payload=payload,
    )
    batch.payload = raw if data_key else b""  # the frame holds it (encrypted: it cannot)
    return True


def frame_single(
    producer: Framer, batch: SealedBatch, publish_time_ms: int, max_frame_size: int
) -> bool:
    """Frame a one-message batch under its id as a non-batched message, in chunks when it is
    larger than a frame; False when it cannot be sent at all (its metadata alone is too
    large)."""
    raw = batch.payload
    (size,) = _U32.unpack_from(raw)
    deliver_at, metadata = take_deliver_at(raw[4 : 4 + size])
    message = pb.SingleMessageMetadata.FromString(metadata)
    value = raw[4 + size :]
    payload, compression = _compress(producer, value)
    frames = commands.single_message_sends(
        producer_id=producer.producer_id,
        producer_name=producer.name or "",
        sequence_id=batch.sequence_id,
        publish_time_ms=publish_time_ms,
        compression=compression,
        uncompressed_size=len(value),
        message=message,
        payload=payload,
        max_chunk_frame=max_frame_size - SEND_FRAME_OVERHEAD,
        deliver_at_ms=deliver_at,
        schema_version=producer.schema_version,
        data_key=_data_key(producer, publish_time_ms),
    )
    if not frames:
        return False
    batch.frame = b"".join(frames)
    batch.frames = len(frames)
    return True  # ``payload`` stays: the frame is no batch to take the entries back from
