"""Encryption fields in the commands a producer sends, golden bytes.

``MessageMetadata`` (PulsarApi.proto): ``encryption_keys`` (13) holds one
``EncryptionKeys`` {key (1) = the public key's name, value (2) = the data key
encrypted with it} per recipient, ``encryption_param`` (15) the IV; the Java client
leaves ``encryption_algo`` (14) unset, and so do we.  ``CommandProducer.encrypted``
(5) says the producer's messages are encrypted (brokers with ``encryption_required``
refuse producers without it).
"""

from __future__ import annotations

from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import FrameDecoder

from tests.unit.daemon.frame.helpers import SEND_METADATA, decode_one, wire

IV = bytes(range(12))


def test_batch_metadata_with_encryption_golden_bytes() -> None:
    metadata = commands.batch_metadata(
        producer_name="p-1",
        sequence_id=5,
        highest_sequence_id=6,
        publish_time_ms=1000,
        num_messages=2,
        compression=pb.NONE,
        uncompressed_size=0,
        encryption_keys=(("app", b"\x01\x02\x03"), ("ops", b"\xff")),
        encryption_param=IV,
    )
    assert metadata == wire(
        "0a 03", b"p-1",  # producer_name (1)
        "10 05",  # sequence_id (2) = 5
        "18 e8 07",  # publish_time (3) = 1000
        "58 02",  # num_messages_in_batch (11) = 2
        "6a 0a", "0a 03", b"app", "12 03 01 02 03",  # encryption_keys (13): app -> 010203
        "6a 08", "0a 03", b"ops", "12 01 ff",  # encryption_keys (13): ops -> ff
        "7a 0c", IV,  # encryption_param (15): the IV
        "c0 01 06",  # highest_sequence_id (24) = 6
    )  # fmt: skip


def test_plain_batch_metadata_is_unchanged() -> None:
    metadata = commands.batch_metadata(
        producer_name="p-1",
        sequence_id=5,
        highest_sequence_id=6,
        publish_time_ms=1000,
        num_messages=2,
        compression=pb.NONE,
        uncompressed_size=0,
    )
    assert metadata == SEND_METADATA


def test_an_encrypting_producer_says_so() -> None:
    frame = decode_one(
        commands.producer("persistent://public/default/t", 1, 2, "p", encrypted=True)
    )
    assert frame.command.producer.encrypted
    plain = decode_one(commands.producer("persistent://public/default/t", 1, 2, "p"))
    assert not plain.command.producer.HasField("encrypted")


class Xor:
    """A stand-in data key (the real one is tested in tests/unit/daemon/batch): IVs 0, 1, 2..
    and a payload XORed with its IV's first byte, two bytes of "tag" after it."""

    keys = (("app", b"\xaa" * 4),)
    expansion = 2
    param_bytes = 12

    def __init__(self) -> None:
        self.ivs = 0

    def seal(self, plaintext: bytes) -> tuple[bytes, bytes]:
        iv = bytes([self.ivs]) * 12
        self.ivs += 1
        return iv, bytes(b ^ iv[0] for b in plaintext) + b"TT"


VALUE = bytes(range(40))


def sends(max_chunk_frame: int, data_key: Xor) -> list[bytes]:
    return commands.single_message_sends(
        producer_id=3,
        producer_name="p-1",
        sequence_id=5,
        publish_time_ms=1000,
        compression=pb.NONE,
        uncompressed_size=len(VALUE),
        message=pb.SingleMessageMetadata(payload_size=len(VALUE)),
        payload=VALUE,
        max_chunk_frame=max_chunk_frame,
        data_key=data_key,
    )


def test_a_message_that_fits_is_sealed_whole() -> None:
    key = Xor()
    [frame] = FrameDecoder().feed(b"".join(sends(200, key)))
    assert frame.metadata is not None
    assert [(k.key, k.value) for k in frame.metadata.encryption_keys] == list(Xor.keys)
    assert frame.metadata.encryption_param == bytes(12)
    assert frame.payload == VALUE + b"TT"
    assert key.ivs == 1


def test_each_chunk_is_sealed_on_its_own_as_the_official_clients_do() -> None:
    """pulsar-client-java ``ProducerImpl.serializeAndSendMessage`` encrypts each chunk's slice
    of the compressed payload; consumers decrypt each chunk, then join them: every chunk
    names the keys and has its own IV, ``total_chunk_msg_size`` counts the plain bytes."""
    key = Xor()
    raw = sends(78, key)
    frames = FrameDecoder().feed(b"".join(raw))
    assert len(frames) > 1 and key.ivs == len(frames)
    plain = b""
    for index, frame in enumerate(frames):
        md = frame.metadata
        assert md is not None and md.chunk_id == index and frame.command.send.is_chunk
        assert [(k.key, k.value) for k in md.encryption_keys] == list(Xor.keys)
        assert md.encryption_param == bytes([index]) * 12
        assert md.total_chunk_msg_size == len(VALUE)
        assert frame.payload.endswith(b"TT")
        plain += bytes(b ^ index for b in frame.payload[:-2])
    assert plain == VALUE
    for data in raw:  # metadata, payload and the tag within the frame limit
        [frame] = FrameDecoder().feed(data)
        assert frame.metadata is not None
        assert frame.metadata.ByteSize() + len(frame.payload) <= 78
