"""Builders for the commands a producer sends, returned as ready-to-write frames."""

from __future__ import annotations

from pulsar_bruce import __version__
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import encode_command, encode_payload_command

#: What we announce in CommandConnect, as current official clients do.
PROTOCOL_VERSION = pb.v20
CLIENT_VERSION = f"pulsar-bruce-{__version__}"

_Type = pb.BaseCommand


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
) -> bytes:
    """Create (or re-create) a producer.

    A name of our own is ``user_provided``; on re-creation a broker-assigned
    name is passed back (flagged as not user-provided, as the official clients
    do) so it stays stable, and ``epoch`` counts the re-creations so the broker
    can tell them apart.
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
) -> bytes:
    """Serialized ``MessageMetadata`` for one batch of ``num_messages`` messages.

    ``first_key``: the first message's ``partition_key`` and base64 flag, which
    the batch carries as its own (the Java client's ``BatchMessageContainerImpl``
    does, through ``Commands.initBatchMessageMetadata``): Key_Shared subscriptions
    dispatch the whole batch by it.
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
    return md.SerializeToString()


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
) -> list[bytes]:
    """Send frames of one non-batched message: one frame, or chunks if it is larger.

    ``message`` is the message's metadata from its batch entry (properties,
    partition key, event time), carried into every chunk's ``MessageMetadata``
    as the official clients do (pulsar-client-java ``ProducerImpl.sendAsync``):
    every chunk has the message's sequence id, ``uuid`` = producer name + "-" +
    sequence id, ``chunk_id`` 0..n-1, ``num_chunks_from_msg`` n and
    ``total_chunk_msg_size`` = the size of the (compressed) payload that is cut
    into chunks.  A chunk's payload plus metadata stays within ``max_chunk_frame``.
    Returns no frames when not even the metadata fits.
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
    plain = md.SerializeToString()
    if len(plain) + len(payload) <= max_chunk_frame:
        return [
            send(
                producer_id=producer_id,
                sequence_id=sequence_id,
                highest_sequence_id=None,
                num_messages=1,
                metadata=plain,
                payload=payload,
            )
        ]
    md.uuid = f"{producer_name}-{sequence_id}"
    md.total_chunk_msg_size = len(payload)
    md.num_chunks_from_msg = md.chunk_id = 0x7FFFFFFF  # the largest these fields can be
    chunk_size = max_chunk_frame - md.ByteSize()
    if chunk_size <= 0:
        return []
    chunks = -(-len(payload) // chunk_size)
    md.num_chunks_from_msg = chunks
    view = memoryview(payload)
    frames = []
    for chunk_id in range(chunks):
        md.chunk_id = chunk_id
        frames.append(
            send(
                producer_id=producer_id,
                sequence_id=sequence_id,
                highest_sequence_id=None,
                num_messages=1,
                metadata=md.SerializeToString(),
                payload=bytes(view[chunk_id * chunk_size : (chunk_id + 1) * chunk_size]),
                is_chunk=True,
            )
        )
    return frames
