"""One partition producer, its write-ahead journal and a broker with deduplication, sans-IO.

What the id-lifecycle tests (``test_id_lifecycle.py``, ``test_id_machine.py``) drive:
the real :class:`PartitionProducer`, :class:`Journal`, ``Appender.queue_sealed`` and
the driver's answer table (:class:`BrokerAnswers`), with the broker's side modelled
on pulsar-broker's ``PersistentTopic.publishMessage`` (topic size check, then
``MessageDeduplication.isDuplicate``: ``tests/support/fake_dedup.py``).  Every
message is a distinct value, so what the broker stored and what the daemon
counted can be compared message by message.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

from pulsar_bruce.batch.batch_builder import batch_entries_of
from pulsar_bruce.batch.compression import decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE, Frame, FrameDecoder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.answers import BrokerAnswers
from pulsar_bruce.producer.faults import NOT_STORED, count_failure
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.producer.topic_size import TOPIC_SIZE_TEXT
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.router import Topic
from pulsar_bruce.spool.journal import Journal

from tests.support.fake_dedup import Deduplication, DupStatus, Publish
from tests.unit.daemon.spool.test_journal import values_of as values_in

TOPIC = "persistent://public/default/ids"
NAME = "edge-host-1"
PRODUCER_ID = 3


def values_of(batch: SealedBatch) -> list[bytes]:
    return values_in(batch.payload if batch.payload or not batch.frame else batch_entries_of(batch))


def send_error(sequence_id: int, error: int, message: str) -> pb.BaseCommand:
    """A ``SendError`` as the Java broker writes it (naming the batch's highest id)."""
    failed = pb.CommandSendError(
        producer_id=PRODUCER_ID, sequence_id=sequence_id, error=error, message=message
    )
    return pb.BaseCommand(type=pb.BaseCommand.SEND_ERROR, send_error=failed)


class Outcomes:
    """The daemon's side of the count: what it reported acked and discarded, per message."""

    def __init__(self) -> None:
        self.acked: Counter[bytes] = Counter()
        self.discarded: Counter[bytes] = Counter()
        #: Messages reported as possibly stored twice (``possible_duplicate`` evidence).
        self.possibly_twice: Counter[bytes] = Counter()
        self.journal: Journal | None = None

    def batches_sent(self, batches: list[SealedBatch], resent_messages: int) -> None:
        pass

    def batches_possibly_stored(self, batches: list[SealedBatch]) -> None:
        for batch in batches:
            self.possibly_twice.update(values_of(batch))

    def batch_acked(self, batch: SealedBatch, latency_s: float) -> None:
        self.acked.update(values_of(batch))
        self._settle(batch)

    def batch_already_stored(self, batch: SealedBatch) -> None:
        self.batch_acked(batch, 0.0)

    def batch_discarded(self, batch: SealedBatch, reason: str) -> None:
        self.discarded.update(values_of(batch))
        self._settle(batch)

    def producer_name_conflict(self, broker_topic: str, name: str) -> None:
        raise AssertionError("no other producer holds the name")

    def _settle(self, batch: SealedBatch) -> None:
        if self.journal is not None:
            self.journal.settled(batch)


class Broker:
    """The broker's side: deduplication per producer name, what it stored, the topic's limit."""

    def __init__(self) -> None:
        self.dedup = Deduplication()
        self.stored: Counter[bytes] = Counter()
        #: (sequence id, highest sequence id) of every Send stored, in order.
        self.stored_ids: list[tuple[int, int]] = []
        #: The sequence id each message was stored under (its entry's own).
        self.id_of: dict[bytes, int] = {}
        #: Sends written and not yet processed, in order.
        self.queue: list[Frame] = []
        #: The topic's own max message size (``PersistentTopic.isExceedMaximumMessageSize``).
        self.topic_limit = 1 << 30
        self._entry = 0

    def last_sequence_id(self) -> int:
        return self.dedup.last_sequence_id(TOPIC, NAME)

    def someone_else_wrote(self, ids: int) -> None:
        """Another process produced ``ids`` messages under our name (two daemons, one name)."""
        top = self.last_sequence_id() + ids
        self.dedup.written(Publish(TOPIC, NAME, top, top))

    def fail(self) -> list[pb.BaseCommand]:
        """A write fails (``PersistentTopic.addFailed``): the topic is fenced so nothing is
        persisted out of order, every Send written fails, and once they have, the ids
        pushed but not persisted are forgotten (``resetHighestSequenceIdPushed``)."""
        answers = []
        for frame in self.queue:
            send = frame.command.send
            highest = max(send.sequence_id, send.highest_sequence_id)
            answers.append(send_error(highest, pb.PersistenceError, "topic fenced"))
        self.queue.clear()
        self.dedup.reset_pushed()
        return answers

    def process(self) -> pb.BaseCommand:
        """Judge and (maybe) store the oldest Send written; the answer the client gets."""
        frame = self.queue.pop(0)
        send = frame.command.send
        highest = max(send.sequence_id, send.highest_sequence_id)
        if len(frame.payload) > self.topic_limit:
            return send_error(highest, pb.NotAllowedError, TOPIC_SIZE_TEXT)
        status = self.dedup.is_duplicate(Publish.of(TOPIC, NAME, frame))
        if status is DupStatus.UNKNOWN:
            return send_error(highest, pb.PersistenceError, "duplicate status unknown")
        ledger = entry = NOT_STORED
        if status is DupStatus.NOT_DUP:
            self.dedup.persisted(Publish.of(TOPIC, NAME, frame))
            assert frame.metadata is not None
            md = frame.metadata
            raw = decompress(md.compression, frame.payload, md.uncompressed_size)
            values = values_in(raw)
            self.stored.update(values)
            for offset, stored in enumerate(values):
                self.id_of[stored] = send.sequence_id + offset
            self.stored_ids.append((send.sequence_id, send.highest_sequence_id))
            self._entry += 1
            ledger, entry = 1, self._entry
        return pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
            producer_id=PRODUCER_ID, sequence_id=send.sequence_id,
            highest_sequence_id=send.highest_sequence_id,
            message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry)))  # fmt: skip


class Process(BrokerAnswers):
    """One run of the daemon for one partition: producer, journal, answer table; no I/O."""

    def __init__(self, directory: Path, outcomes: Outcomes, broker: Broker) -> None:
        self.outcomes = self.listener = outcomes
        self.broker = broker
        self.topic_batch_limit = 1 << 62
        self.clock = lambda: 0.0  # no time passes: every batch is "sent" at 0.0
        self._unstored_logged = set()
        self.journal = Journal(directory, "never")
        self.recovered = self.journal.open()
        outcomes.journal = self.journal
        self.producer = PartitionProducer(TOPIC, 0, PRODUCER_ID, BatchPolicy())
        self.producer.name, self.producer.name_is_ours = NAME, True
        self.journal.producer_added(self.producer, TOPIC, 0)
        self.topic = Topic(TOPIC)
        self.topic.attach([self.producer])
        self.connected = False
        #: The broker's max message size (a batch over it is split before it is sent).
        self.max_frame = DEFAULT_MAX_MESSAGE_SIZE
        for spooled in self.recovered.batches:  # as Intake.replay_batch does
            batch = SealedBatch(spooled.count, spooled.entries, len(spooled.entries))
            if spooled.producer_name and spooled.sequence_id >= 0:
                batch.sequence_id, batch.producer_name = spooled.sequence_id, spooled.producer_name
            Appender(self).queue_sealed(self.topic, spooled.partition, batch)
        self.journal.drop_previous()

    # BatchEvents
    def batch_opened(self, producer: PartitionProducer) -> None:
        self.journal.touched(producer)

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self.journal.touched(producer)

    # -- what the driver does ------------------------------------------------------------

    def add(self, *values: bytes) -> None:
        for value in values:
            self.producer.batch.append(b"", 0, value, 0, len(value) + 40)
        self.journal.touched(self.producer)
        self.journal.sync()

    def seal(self) -> None:
        self.producer.seal()
        self.journal.sync()

    def connect(self) -> None:
        renumbered = self.producer.on_registered(NAME, self.broker.last_sequence_id())
        if renumbered is not None and renumbered.possibly_stored:  # as the driver reports it
            self.outcomes.batches_possibly_stored(renumbered.possibly_stored)
        self.connected = True
        self.flush()

    def flush(self) -> None:
        producer = self.producer
        if not self.connected or not producer.has_unsent:
            return
        self.journal.sync_producer(producer)
        out = producer.frames_to_send(1, self.max_frame)
        for batch, reason in out.rejected:
            self.listener.batch_discarded(batch, reason)
        self.journal.sent(producer, out.batches)
        decoder = FrameDecoder()
        for frame in out.frames:
            self.broker.queue.extend(decoder.feed(frame))
        producer.check()

    def _recreate(self, reason: str, failed: SealedBatch | None = None) -> None:
        """Re-created on its connection: the broker answers what was written first."""
        count_failure(failed)
        if self.connected:
            self.producer.pause()
            self.connected = False

    def answer(self) -> None:
        """The broker processes the oldest Send written; the daemon reads its answer."""
        self._read(self.broker.process())

    def fail_writes(self) -> None:
        """The broker fails every Send written (a failed write fences the topic)."""
        for command in self.broker.fail():
            self._read(command)

    def _read(self, command: pb.BaseCommand) -> None:
        if command.type == pb.BaseCommand.SEND_RECEIPT:
            self.on_receipt(command.send_receipt)
        else:
            self.on_send_error(command.send_error)
        self.producer.check()

    def drop_connection(self, processed: int) -> None:
        """The connection is lost: the broker processed ``processed`` more Sends (their
        answers lost with it) and never saw the rest."""
        for _ in range(min(processed, len(self.broker.queue))):
            self.broker.process()
        self.broker.queue.clear()
        self.producer.on_disconnected()
        self.connected = False

    def reconnect(self) -> None:
        """After a re-creation: the broker answered everything written before it answered
        CloseProducer; then the producer registers again."""
        while self.broker.queue:
            self.answer()
        self.producer.on_disconnected()
        self.connect()

    def crash(self) -> Process:
        """A second passes (the journal records what settled), then the process is killed
        (its connection's unprocessed Sends are lost); the next run starts from its journal."""
        self.journal.tick()
        self.kill()
        return Process(self.journal.directory, self.outcomes, self.broker)

    def kill(self) -> None:
        """The process dies: its connection is gone, its journal's file closed as it was."""
        self.drop_connection(processed=0)
        fd = self.journal.files._fd  # what the kernel closes for a killed process
        if fd >= 0:
            os.close(fd)
            self.journal.files._fd = -1

    def settle_all(self, rounds: int = 200) -> None:
        """Connect and answer until nothing is left to send (each round: every answer)."""
        for _ in range(rounds):
            if not self.connected:
                self.reconnect()
            while self.broker.queue:
                self.answer()
            self.producer.seal()
            self.flush()
            if not self.producer.pending and not self.broker.queue and self.connected:
                return
        raise AssertionError(f"not settled: {len(self.producer.pending)} batches pending")


def new_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="pulsar-bruce-ids-"))
