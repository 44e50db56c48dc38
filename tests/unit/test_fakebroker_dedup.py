"""The fake broker's deduplication model (``tests/support/fake_dedup.py``) against the Java broker.

Modelled on pulsar-broker ``MessageDeduplication.isDuplicateNormal`` /
``recordMessagePersistedNormal`` / ``getLastPublishedSequenceId``,
``PersistentTopic.publishMessage`` and ``Producer.MessagePublishContext``: first the
model on its own, then the fake broker answering a raw producer over a socket.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from pulsar_bruce.frame import commands
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame, FrameDecoder

from tests.support.fake_dedup import Deduplication, DupStatus, Publish
from tests.support.fakebroker import FakeBroker

T = "persistent://public/default/dedup"
MINUS_ONE = 2**64 - 1  # -1 as the uint64 of a MessageIdData


# -- the model ------------------------------------------------------------------------------------


def test_a_resend_after_it_was_persisted_is_a_duplicate() -> None:
    dedup = Deduplication()
    batch = Publish(T, "edge", 0, 4)
    assert dedup.is_duplicate(batch) is DupStatus.NOT_DUP
    dedup.persisted(batch)
    assert dedup.is_duplicate(batch) is DupStatus.DUP
    assert dedup.is_duplicate(Publish(T, "edge", 4)) is DupStatus.DUP
    assert dedup.is_duplicate(Publish(T, "edge", 5, 6)) is DupStatus.NOT_DUP


def test_a_resend_pushed_but_not_persisted_is_unknown_until_it_is() -> None:
    dedup = Deduplication()
    batch = Publish(T, "edge", 0, 4)
    dedup.written(batch, slow=True)
    assert dedup.check(batch) is DupStatus.UNKNOWN
    assert dedup.last_sequence_id(T, "edge") == 4  # ProducerSuccess names what was pushed
    assert dedup.highest_persisted(T, "edge") is None
    dedup.persist_pending()
    assert dedup.check(batch) is DupStatus.DUP


def test_a_batch_is_judged_by_its_lowest_id_alone() -> None:
    """Ids 3..6 after 0..4 persisted: a duplicate as a whole, 5 and 6 included."""
    dedup = Deduplication()
    dedup.written(Publish(T, "edge", 0, 4))
    assert dedup.check(Publish(T, "edge", 3, 6)) is DupStatus.DUP


def test_the_state_belongs_to_a_topic_and_a_name() -> None:
    dedup = Deduplication()
    dedup.written(Publish(T, "edge", 0, 9))
    assert dedup.check(Publish(T, "other", 0, 9)) is DupStatus.NOT_DUP
    assert dedup.check(Publish(T + "-2", "edge", 0, 9)) is DupStatus.NOT_DUP
    assert dedup.last_sequence_id(T, "other") == -1


def test_only_the_last_chunk_is_checked_and_recorded() -> None:
    dedup = Deduplication()
    first, last = Publish(T, "edge", 7, chunk=(0, 2)), Publish(T, "edge", 7, chunk=(1, 2))
    dedup.written(first)
    assert dedup.last_sequence_id(T, "edge") == -1  # chunk 0 records nothing
    assert dedup.highest_persisted(T, "edge") is None
    dedup.written(last)
    assert (dedup.last_sequence_id(T, "edge"), dedup.highest_persisted(T, "edge")) == (7, 7)
    # Resent whole: the first chunk is never a duplicate (stored again), the last one is.
    assert dedup.check(first) is DupStatus.NOT_DUP
    assert dedup.check(last) is DupStatus.DUP


def test_a_failed_write_leaves_the_pushed_ids_at_the_persisted_ones() -> None:
    dedup = Deduplication()
    dedup.written(Publish(T, "edge", 0, 1))
    dedup.push(Publish(T, "edge", 2, 3))
    dedup.reset_pushed()  # PersistentTopic.addFailed, then un-fencing
    assert dedup.last_sequence_id(T, "edge") == 1
    assert dedup.check(Publish(T, "edge", 2, 3)) is DupStatus.NOT_DUP


# -- the fake broker, over a socket ----------------------------------------------------------------


class Client:
    """Just enough of a producer client to script Sends at the fake broker."""

    def __init__(self, broker: FakeBroker):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []
        self.requests = 0
        self.sock.sendall(commands.connect())
        self.expect(pb.BaseCommand.CONNECTED)

    def close(self) -> None:
        self.sock.close()

    def expect(self, kind: int) -> pb.BaseCommand:
        """The next command received, which must be of type ``kind``."""
        while not self.frames:
            data = self.sock.recv(65536)
            assert data, "connection closed"
            self.frames.extend(self.decoder.feed(data))
        command = self.frames.pop(0).command
        assert command.type == kind, command
        return command

    def nothing_more(self) -> None:
        self.sock.settimeout(0.3)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            data = b""
        finally:
            self.sock.settimeout(5)
        assert not data and not self.frames

    def producer(self, producer_id: int, name: str) -> pb.CommandProducerSuccess:
        self.requests += 1
        self.sock.sendall(
            commands.producer(T, producer_id, self.requests, name, user_provided=True)
        )
        return self.expect(pb.BaseCommand.PRODUCER_SUCCESS).producer_success

    def send_batch(
        self, producer_id: int, sequence_id: int, values: list[bytes], name: str
    ) -> None:
        """A batch of ``values`` numbered from ``sequence_id``; ``name`` in its metadata."""
        payload = b""
        for value in values:  # [u32 size][SingleMessageMetadata][value] each
            single = pb.SingleMessageMetadata(payload_size=len(value)).SerializeToString()
            payload += struct.pack(">I", len(single)) + single + value
        highest = sequence_id + len(values) - 1
        metadata = commands.batch_metadata(
            producer_name=name,
            sequence_id=sequence_id,
            highest_sequence_id=highest,
            publish_time_ms=1,
            num_messages=len(values),
            compression=0,
            uncompressed_size=len(payload),
        )
        self.sock.sendall(
            commands.send(
                producer_id=producer_id,
                sequence_id=sequence_id,
                highest_sequence_id=highest,
                num_messages=len(values),
                metadata=metadata,
                payload=payload,
            )
        )

    def send_chunks(self, producer_id: int, sequence_id: int, value: bytes, name: str) -> int:
        """``value`` as one message cut into chunks; returns how many chunks."""
        frames = commands.single_message_sends(
            producer_id=producer_id,
            producer_name=name,
            sequence_id=sequence_id,
            publish_time_ms=1,
            compression=0,
            uncompressed_size=len(value),
            message=pb.SingleMessageMetadata(payload_size=len(value)),
            payload=value,
            max_chunk_frame=200,
        )
        self.sock.sendall(b"".join(frames))
        return len(frames)

    def receipt(self) -> pb.CommandSendReceipt:
        return self.expect(pb.BaseCommand.SEND_RECEIPT).send_receipt


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    broker = FakeBroker(deduplication=True).start()
    yield broker
    broker.stop()


@pytest.fixture
def client(broker: FakeBroker) -> Iterator[Client]:
    client = Client(broker)
    yield client
    client.close()


def message_id(receipt: pb.CommandSendReceipt) -> tuple[int, int]:
    return (receipt.message_id.ledgerId, receipt.message_id.entryId)


def test_a_persisted_batch_sent_again_gets_a_receipt_for_message_id_minus_one(
    broker: FakeBroker, client: Client
) -> None:
    """``PersistentTopic.publishMessage``: a Dup is acknowledged at once with
    ``completed(null, -1, -1)`` and not written."""
    assert client.producer(1, "edge").last_sequence_id == -1
    client.send_batch(1, 0, [b"a", b"b"], "edge")
    stored = client.receipt()
    assert message_id(stored)[0] == 1
    client.send_batch(1, 0, [b"a", b"b"], "edge")
    dup = client.receipt()
    assert (dup.sequence_id, dup.highest_sequence_id) == (0, 1)
    assert message_id(dup) == (MINUS_ONE, MINUS_ONE)
    assert broker.values() == [b"a", b"b"]
    assert [s.receipt for s in broker.sends()] == ["sent", "duplicate"]


def test_a_resend_still_being_persisted_fails_with_persistence_error(
    broker: FakeBroker, client: Client
) -> None:
    """Pushed, not persisted: ``MessageDupUnknownException``, which the client gets as
    ``SendError(PersistenceError)`` naming the batch's highest id; once persisted, Dup."""
    client.producer(1, "edge")
    broker.hold_receipts(T)
    client.send_batch(1, 0, [b"a", b"b", b"c"], "edge")
    client.nothing_more()  # held: still being written
    client.send_batch(1, 0, [b"a", b"b", b"c"], "edge")
    error = client.expect(pb.BaseCommand.SEND_ERROR).send_error
    assert (error.error, error.sequence_id) == (pb.PersistenceError, 2)
    # ProducerSuccess.last_sequence_id is the highest id pushed, persisted or not.
    assert client.producer(2, "edge").last_sequence_id == 2
    assert broker.release_held_receipts() == 1
    assert message_id(client.receipt())[0] == 1
    client.send_batch(2, 0, [b"a", b"b", b"c"], "edge")
    assert message_id(client.receipt()) == (MINUS_ONE, MINUS_ONE)
    assert broker.values() == [b"a", b"b", b"c"]
    assert [s.receipt for s in broker.sends()] == ["held", "unknown", "duplicate"]


def test_the_registered_name_counts_not_the_metadatas(broker: FakeBroker, client: Client) -> None:
    """``MessagePublishContext.getProducerName`` is the producer's registered name."""
    client.producer(1, "edge-1")
    client.send_batch(1, 0, [b"a"], "not-my-name")
    client.receipt()
    assert client.producer(2, "not-my-name").last_sequence_id == -1
    assert client.producer(3, "edge-1").last_sequence_id == 0
    client.send_batch(2, 0, [b"b"], "edge-1")  # registered as "not-my-name": new there
    assert message_id(client.receipt())[0] == 1
    client.send_batch(3, 0, [b"c"], "whatever")  # registered as "edge-1": a duplicate
    assert message_id(client.receipt()) == (MINUS_ONE, MINUS_ONE)
    assert broker.values() == [b"a", b"b"]


def test_a_chunked_message_is_recorded_by_its_last_chunk(
    broker: FakeBroker, client: Client
) -> None:
    """Every chunk but the last is NotDup without being recorded; the last chunk is
    checked, and recorded once persisted.  Resent whole, the earlier chunks are
    written again and only the last one is a duplicate."""
    value = bytes(range(200)) * 3  # 600 bytes: at least 3 chunks of 200-byte frames
    client.producer(1, "edge")
    broker.hold_receipts(T)  # written slowly: the first chunk's id is neither pushed ...
    chunks = client.send_chunks(1, 5, value, "edge")
    assert chunks >= 3
    assert client.producer(2, "edge").last_sequence_id == 5  # ... only the last chunk's is
    broker.release_held_receipts()
    for _ in range(chunks):
        assert client.receipt().sequence_id == 5
    assert broker.values() == [value]

    assert client.send_chunks(1, 5, value, "edge") == chunks
    receipts = [client.receipt() for _ in range(chunks)]
    assert [message_id(r)[0] for r in receipts] == [1] * (chunks - 1) + [MINUS_ONE]
    assert [s.receipt for s in broker.sends()] == ["held"] * chunks + ["sent"] * (chunks - 1) + [
        "duplicate"
    ]
    assert broker.values() == [value]  # the resent chunks never make a message


def test_only_a_stored_last_chunk_moves_the_last_sequence_id(
    broker: FakeBroker, client: Client
) -> None:
    client.producer(1, "edge")
    frames = commands.single_message_sends(
        producer_id=1,
        producer_name="edge",
        sequence_id=3,
        publish_time_ms=1,
        compression=0,
        uncompressed_size=500,
        message=pb.SingleMessageMetadata(payload_size=500),
        payload=b"x" * 500,
        max_chunk_frame=200,
    )
    client.sock.sendall(frames[0])
    client.receipt()
    assert client.producer(2, "edge").last_sequence_id == -1
    assert broker.values() == []
