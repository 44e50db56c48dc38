"""Builders for the commands a producer sends, returned as ready-to-write frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pulsar_bruce import __version__
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import encode_command, encode_payload_command
from pulsar_bruce.model.schema import ProducerSchema, SchemaKind

#: What we announce in CommandConnect, as current official clients do.
PROTOCOL_VERSION = pb.v20
CLIENT_VERSION = f"pulsar-bruce-{__version__}"

_Type = pb.BaseCommand
#: ``Schema.Type`` of each declared schema kind (bytes declares none, as the Java client).
_SCHEMA_TYPES = {
    SchemaKind.STRING: pb.Schema.String,
    SchemaKind.JSON: pb.Schema.Json,
    SchemaKind.AVRO: pb.Schema.Avro,
}


class Sealer(Protocol):
    """Encrypts payloads under one data key (``batch/encryption.py``'s ``DataKey``)."""

    @property
    def keys(self) -> Sequence[tuple[str, bytes]]:
        """``(public key name, data key encrypted with it)`` for each recipient."""

    @property
    def expansion(self) -> int:
        """Bytes a sealed payload is longer than the plain one (the GCM tag)."""

    @property
    def param_bytes(self) -> int:
        """Length of ``encryption_param`` (the IV)."""

    def seal(self, plaintext: bytes) -> tuple[bytes, bytes]:
        """``(encryption_param, sealed payload)``."""


def connect(
    *,
    proxy_to_broker_url: str | None = None,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
) -> bytes:
    cmd = pb.BaseCommand(type=_Type.CONNECT)
    c = cmd.connect
    c.client_version = CLIENT_VERSION
    c.protocol_version = PROTOCOL_VERSION
    if proxy_to_broker_url:
        c.proxy_to_broker_url = proxy_to_broker_url
    if auth_method_name:
        c.auth_method_name = auth_method_name
        c.auth_data = auth_data or b""
    c.feature_flags.supports_auth_refresh = True
    return encode_command(cmd)


def ping() -> bytes:
    cmd = pb.BaseCommand(type=_Type.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


def pong() -> bytes:
    cmd = pb.BaseCommand(type=_Type.PONG)
    cmd.pong.SetInParent()
    return encode_command(cmd)


def partitioned_metadata(topic: str, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_Type.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = topic
    cmd.partitionMetadata.request_id = request_id
    return encode_command(cmd)


def lookup(
    topic: str, request_id: int, authoritative: bool, advertised_listener: str | None = None
) -> bytes:
    """``advertised_listener`` names the broker listener whose URL the answer should carry
    (clusters that advertise several, e.g. internal and external addresses)."""
    cmd = pb.BaseCommand(type=_Type.LOOKUP)
    cmd.lookupTopic.topic = topic
    cmd.lookupTopic.request_id = request_id
    cmd.lookupTopic.authoritative = authoritative
    if advertised_listener:
        cmd.lookupTopic.advertised_listener_name = advertised_listener
    return encode_command(cmd)


def producer(
    topic: str,
    producer_id: int,
    request_id: int,
    producer_name: str | None,
    epoch: int = 0,
    *,
    user_provided: bool = False,
    schema: ProducerSchema | None = None,
    encrypted: bool = False,
) -> bytes:
    """Create (or re-create) a producer.

    A name of our own is ``user_provided``; on re-creation a broker-assigned
    name is passed back (flagged as not user-provided, as the official clients
    do) so it stays stable, and ``epoch`` counts the re-creations so the broker
    can tell them apart.  A declared ``schema`` goes as the Java client's
    ``Commands.newProducer`` sends its ``SchemaInfo``: name, data, type, properties.
    ``encrypted``: its messages are (a namespace with ``encryption_required`` takes only
    such producers), as the official clients say with encryption keys configured.
    """
    cmd = pb.BaseCommand(type=_Type.PRODUCER)
    p = cmd.producer
    p.topic = topic
    p.producer_id = producer_id
    p.request_id = request_id
    if producer_name:
        p.producer_name = producer_name
        p.user_provided_producer_name = user_provided
    if epoch:
        p.epoch = epoch
    if encrypted:
        p.encrypted = True
    if schema is not None and schema.declared:
        p.schema.name = schema.name
        p.schema.schema_data = schema.definition
        p.schema.type = _SCHEMA_TYPES[schema.kind]
        p.schema.properties.extend(pb.KeyValue(key=k, value=v) for k, v in schema.properties)
    return encode_command(cmd)


def close_producer(producer_id: int, request_id: int) -> bytes:
    cmd = pb.BaseCommand(type=_Type.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = producer_id
    cmd.close_producer.request_id = request_id
    return encode_command(cmd)


def batch_metadata(
    *,
    producer_name: str,
    sequence_id: int,
    highest_sequence_id: int,
    publish_time_ms: int,
    num_messages: int,
    compression: int,
    uncompressed_size: int,
    first_key: tuple[str | None, bool] = (None, False),
    schema_version: bytes = b"",
    encryption_keys: Sequence[tuple[str, bytes]] = (),
    encryption_param: bytes = b"",
) -> bytes:
    """Serialized ``MessageMetadata`` for one batch of ``num_messages`` messages.

    ``first_key``: the first message's ``partition_key`` and base64 flag, which
    the batch carries as its own (the Java client's ``BatchMessageContainerImpl``
    does, through ``Commands.initBatchMessageMetadata``): Key_Shared subscriptions
    dispatch the whole batch by it.  ``schema_version``: the producer's, from its
    ``ProducerSuccess``, as the Java client stamps every message (readers of older
    schema versions decode by it).
    """
    md = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time_ms,
        num_messages_in_batch=num_messages,
        highest_sequence_id=highest_sequence_id,
    )
    if compression:
        md.compression = compression  # type: ignore[assignment]
        md.uncompressed_size = uncompressed_size
    partition_key, partition_key_b64 = first_key
    if partition_key is not None:
        md.partition_key = partition_key
        if partition_key_b64:
            md.partition_key_b64_encoded = True
    if schema_version:
        md.schema_version = schema_version
    _encryption(md, encryption_keys, encryption_param)
    return md.SerializeToString()


def _encryption(md: pb.MessageMetadata, keys: Sequence[tuple[str, bytes]], param: bytes) -> None:
    """An encrypted payload's fields: the data key for each named public key, and the IV."""
    md.encryption_keys.extend(pb.EncryptionKeys(key=name, value=value) for name, value in keys)
    if param:
        md.encryption_param = param


def send(
    *,
    producer_id: int,
    sequence_id: int,
    highest_sequence_id: int | None,
    num_messages: int,
    metadata: bytes,
    payload: bytes,
    is_chunk: bool = False,
) -> bytes:
    """A Send of a batch, or (``highest_sequence_id`` None) of one non-batched message."""
    cmd = pb.BaseCommand(type=_Type.SEND)
    s = cmd.send
    s.producer_id = producer_id
    s.sequence_id = sequence_id
    if highest_sequence_id is not None:
        s.highest_sequence_id = highest_sequence_id
    s.num_messages = num_messages
    if is_chunk:
        s.is_chunk = True
    return encode_payload_command(cmd, metadata, payload)


def single_message_sends(
    *,
    producer_id: int,
    producer_name: str,
    sequence_id: int,
    publish_time_ms: int,
    compression: int,
    uncompressed_size: int,
    message: pb.SingleMessageMetadata,
    payload: bytes,
    max_chunk_frame: int,
    deliver_at_ms: int = 0,
    schema_version: bytes = b"",
    data_key: Sealer | None = None,
) -> list[bytes]:
    """Send frames of one non-batched message: one frame, or chunks if it is larger.

    ``message`` is the message's metadata from its batch entry (properties,
    partition key, event time), carried into every chunk's ``MessageMetadata``
    as the official clients do (pulsar-client-java ``ProducerImpl.sendAsync``):
    every chunk has the message's sequence id, ``uuid`` = producer name + "-" +
    sequence id, ``chunk_id`` 0..n-1, ``num_chunks_from_msg`` n and
    ``total_chunk_msg_size`` = the size of the (compressed) payload that is cut
    into chunks.  A chunk's payload plus metadata stays within ``max_chunk_frame``.
    Returns no frames when not even the metadata fits.  With a ``data_key`` every
    frame's payload (each chunk) is sealed on its own, with its own IV, as the Java
    and C++ clients do: consumers decrypt each chunk, then join and decompress.
    """
    md = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time_ms,
        uncompressed_size=uncompressed_size,
    )
    if compression:
        md.compression = compression  # type: ignore[assignment]
    md.properties.extend(message.properties)
    if message.HasField("partition_key"):
        md.partition_key = message.partition_key
        if message.partition_key_b64_encoded:
            md.partition_key_b64_encoded = True
    if message.event_time:
        md.event_time = message.event_time
    if message.HasField("ordering_key"):
        md.ordering_key = message.ordering_key
    if deliver_at_ms:  # delayed delivery: only a non-batched message can carry it
        md.deliver_at_time = deliver_at_ms
    if schema_version:
        md.schema_version = schema_version
    expansion = 0
    if data_key is not None:  # a placeholder IV of the right size, for the sizes below
        _encryption(md, data_key.keys, bytes(data_key.param_bytes))
        expansion = data_key.expansion
    if md.ByteSize() + len(payload) + expansion <= max_chunk_frame:
        if data_key is not None:
            md.encryption_param, payload = data_key.seal(payload)
        return [
            send(
                producer_id=producer_id,
                sequence_id=sequence_id,
                highest_sequence_id=None,
                num_messages=1,
                metadata=md.SerializeToString(),
                payload=payload,
            )
        ]
    md.uuid = f"{producer_name}-{sequence_id}"
    md.total_chunk_msg_size = len(payload)
    md.num_chunks_from_msg = md.chunk_id = 0x7FFFFFFF  # the largest these fields can be
    chunk_size = max_chunk_frame - md.ByteSize() - expansion
    if chunk_size <= 0:
        return []
    chunks = -(-len(payload) // chunk_size)
    md.num_chunks_from_msg = chunks
    view = memoryview(payload)
    frames = []
    for chunk_id in range(chunks):
        md.chunk_id = chunk_id
        chunk = bytes(view[chunk_id * chunk_size : (chunk_id + 1) * chunk_size])
        if data_key is not None:
            md.encryption_param, chunk = data_key.seal(chunk)
        frames.append(
            send(
                producer_id=producer_id,
                sequence_id=sequence_id,
                highest_sequence_id=None,
                num_messages=1,
                metadata=md.SerializeToString(),
                payload=chunk,
                is_chunk=True,
            )
        )
    return frames
