"""One partition producer, its write-ahead journal and a broker as adversarial as the real one.

What the id-lifecycle tests (``test_id_lifecycle.py``, ``test_id_machine.py``) drive:
the real :class:`PartitionProducer`, :class:`Journal`, ``Appender.queue_sealed`` and
the driver's answer table (:class:`BrokerAnswers`), against ``broker_model.py``'s
broker (pulsar-broker's ``PersistentTopic.publishMessage``, ``MessageDeduplication``
and a bookie that persists in order, late, or not at all).  Every message is a
distinct value, so what the broker stored and what the daemon counted can be
compared message by message.  Sans-IO: no time passes unless a step says so.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import batch_entries_of
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE, FrameDecoder
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.answers import BrokerAnswers
from pulsar_bruce.producer.faults import count_failure
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.service.shutdown import forget_buffered, spool_records_of
from pulsar_bruce.spool import records
from pulsar_bruce.spool.journal import Journal
from pulsar_bruce.spool.records import SpooledBatch

from tests.unit.daemon.producer.broker_model import NAME, PRODUCER_ID, TOPIC, Broker
from tests.unit.daemon.spool.test_journal import values_of as values_in

__all__ = ["NAME", "PRODUCER_ID", "TOPIC", "Broker", "Outcomes", "Process", "new_directory"]

#: When a batch is sealed, and the deadline a send timeout gives up what is older (seconds).
SEALED_AT, TIMED_OUT_AT = 1.0, 2.0


def values_of(batch: SealedBatch) -> list[bytes]:
    return values_in(batch.payload if batch.payload or not batch.frame else batch_entries_of(batch))


class Outcomes:
    """The daemon's side of the count: what it reported acked and discarded, per message."""

    def __init__(self) -> None:
        self.acked: Counter[bytes] = Counter()
        self.discarded: Counter[bytes] = Counter()
        #: Messages reported as possibly stored twice (``possible_duplicate`` evidence).
        self.possibly_twice: Counter[bytes] = Counter()
        #: The reason each discarded message was given.
        self.reason: dict[bytes, str] = {}
        #: Discarded as ``unconfirmed`` ("may be stored") when every write of it was refused.
        self.certainly_unstored: list[bytes] = []
        #: The broker, to tell what the daemon can know (see ``Broker.may_be_stored``).
        self.broker: Broker | None = None
        #: Batches settled since the process last told its journal (as ``route/outcomes.py``
        #: writes them down for the pipeline to take).
        self.settled: list[SealedBatch] = []

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
        values = values_of(batch)
        self.discarded.update(values)
        for value in values:
            self.reason[value] = reason
        if reason == reasons.UNCONFIRMED and self.broker is not None:
            self.certainly_unstored += [v for v in values if not self.broker.may_be_stored(v)]
        self._settle(batch)

    def replayed(self, values: list[bytes]) -> None:
        """A crash came before the journal recorded that these were discarded: the new run
        decides about them again (the dead run's count dies with it)."""
        for value in values:
            if self.reason.pop(value, None) is not None:
                del self.discarded[value]

    def producer_name_conflict(self, broker_topic: str, name: str) -> None:
        raise AssertionError("no other producer holds the name")

    def _settle(self, batch: SealedBatch) -> None:
        self.settled.append(batch)


class PipelineJournal(Journal):
    """The rig's journal, also as the drivers' hook sees it (``JournalCalls``): what the
    process settled is handed over before it is written."""

    def __init__(self, directory: Path, outcomes: Outcomes) -> None:
        super().__init__(directory, "never")
        self.outcomes = outcomes

    def settle_now(self) -> None:
        """After a drain, or at once (``SendJournal.settle_now``): what settled since, then
        what the producer added, journalled."""
        for batch in self.outcomes.settled:
            self.settled(batch)
        self.outcomes.settled.clear()
        self.sync()


class Process(BrokerAnswers):
    """One run of the daemon for one partition: producer, journal, answer table; no I/O."""

    def __init__(
        self,
        directory: Path,
        outcomes: Outcomes,
        broker: Broker,
        max_attempts: int = 0,
        front: Sequence[SpooledBatch] = (),
    ) -> None:
        """A new run: what the last one's journal holds replayed, and ``front``, what a
        shutdown wrote to the front of the spool."""
        self.outcomes = self.listener = outcomes
        self.broker = outcomes.broker = broker
        self.topic_batch_limit = 1 << 62
        self.clock = lambda: 0.0  # no time passes: every batch is "sent" at 0.0
        self._unstored_logged = set()
        self.journal = PipelineJournal(directory, outcomes)
        self.recovered = self.journal.open()
        outcomes.settled.clear()  # what the dead run settled died with it
        self.producer = PartitionProducer(broker.topic, 0, PRODUCER_ID, BatchPolicy())
        self.producer.name, self.producer.name_is_ours = NAME, True
        self.journal.producer_added(self.producer, broker.topic, 0)
        self.topic = Topic(broker.topic)
        self.topic.attach([self.producer])
        #: Registered and writing; or being closed on the broker to be re-created.
        self.connected = self.closing = False
        #: The broker's max message size (a batch over it is split before it is sent).
        self.max_frame = DEFAULT_MAX_MESSAGE_SIZE
        #: ``--max-send-attempts`` (0: no limit).
        self.max_attempts = max_attempts
        for spooled in [*front, *self.recovered.batches]:  # as Intake.replay_batch does
            outcomes.replayed(values_in(spooled.entries))
            kept = bool(spooled.producer_name) and spooled.sequence_id >= 0
            batch = SealedBatch(
                spooled.count,
                spooled.entries,
                len(spooled.entries),
                sequence_id=spooled.sequence_id if kept else -1,
                producer_name=spooled.producer_name if kept else "",
            )
            if spooled.stored_before:  # refused after a write that may be stored
                batch.stored_before = True
                outcomes.batches_possibly_stored([batch])
            appender = Appender()
            appender.queue_sealed(self.topic, spooled.partition, batch)
            for producer in appender.take_batches()[1]:  # what the topic manager does
                self.journal.touched(producer)
        self.journal.drop_previous()

    # -- what the pipeline does (``pipeline/journalling.py``) ------------------------------

    def sync(self) -> None:
        """After a drain: what settled since, then what it added, journalled."""
        self.journal.settle_now()

    def tick(self) -> None:
        """About once a second: the journal records what settled meanwhile."""
        self.sync()
        self.journal.tick()

    # -- what the driver does ------------------------------------------------------------

    def add(self, *values: bytes) -> None:
        for value in values:
            self.producer.batch.append(b"", 0, value, 0, len(value) + 40)
        self.journal.touched(self.producer)
        self.sync()

    def seal(self) -> None:
        self.producer.seal()
        self.sync()

    def connect(self) -> None:
        renumbered = self.producer.on_registered(NAME, self.broker.last_sequence_id())
        if renumbered is not None and renumbered.possibly_stored:  # as the driver reports it
            self.outcomes.batches_possibly_stored(renumbered.possibly_stored)
        self.connected = True
        self.flush()

    def flush(self) -> None:
        producer = self.producer
        for batch in producer.pending:  # as SendTimeout.stamp does
            batch.created_at = batch.created_at or SEALED_AT
        if not self.connected or not producer.has_unsent:
            return
        self.journal.sync_producer(producer)
        out = producer.frames_to_send(1, self.max_frame, self.max_attempts)
        self.journal.sent(producer, out)
        if out.possibly_stored:
            self.outcomes.batches_possibly_stored(out.possibly_stored)
        for batch, reason in out.rejected:
            self.listener.batch_discarded(batch, reason)
        decoder = FrameDecoder()
        for frame in out.frames:
            for send in decoder.feed(frame):
                self.broker.write(send)
        producer.check()

    def _recreate(self, reason: str, failed: SealedBatch | None = None) -> None:
        """Closed on its connection, to be re-created (:meth:`reconnect`)."""
        count_failure(failed)
        if self.connected:
            self.producer.pause()
            self.connected, self.closing = False, True

    def _ride_out(self, reason: str) -> None:
        self._recreate(reason)

    def answer(self) -> None:
        """The broker judges the oldest Send written; the daemon reads what it answered."""
        self.broker.process()
        self.read_all()

    def read(self, answers: int) -> None:
        """The daemon reads up to ``answers`` answers."""
        for _ in range(min(answers, len(self.broker.answers))):
            self._read(self.broker.read())

    def read_all(self) -> None:
        while self.broker.answers:
            self._read(self.broker.read())

    def fail_writes(self) -> None:
        """The broker fails every Send written and every write pending (a fenced topic)."""
        broker = self.broker
        while broker.queue:
            broker.corrupt_next = False
            written = broker.queue.pop(0)
            broker.bookie.append(written)  # failed with the writes before it
        broker.fail_bookie()
        self.read_all()

    def _read(self, command: pb.BaseCommand) -> None:
        if command.type == pb.BaseCommand.SEND_RECEIPT:
            self.on_receipt(command.send_receipt)
        else:
            self.on_send_error(command.send_error)
        self.producer.check()

    def drop_connection(self, processed: int) -> None:
        """The connection is lost: the broker judged ``processed`` more Sends (their answers
        lost with it) and never saw the rest."""
        for command in self.broker.judge_before_drop(processed):
            self._read(command)
        self.broker.drop_connection()
        self.connected = self.closing = False
        self.producer_disconnected()

    def reconnect(self) -> None:
        """Register again.  After a re-creation the broker answers CloseProducer once every
        write of the connection is complete (the daemon reads every answer before it); a
        bookie that holds one makes the close time out, and the connection is aborted."""
        if self.closing and not self.close_answered():
            self.drop_connection(processed=0)
        self.producer_disconnected()
        self.connect()

    def close_answered(self) -> bool:
        """The broker answers the re-creation's CloseProducer (False: it does not, a write
        still held by the bookie); the registration after it is a step of its own."""
        if not self.broker.close_producer():
            return False
        self.read_all()
        self.producer.on_closed()
        self.closing = False
        return True

    def time_out(self) -> None:
        """``--send-timeout-s`` passes for every batch sealed so far (``SendTimeout._expire``)."""
        self.flush()  # stamps what was queued (a replay too), as the driver's flush does
        for batch in self.producer.expire(TIMED_OUT_AT):
            reason = reasons.given_up(reasons.SEND_TIMEOUT, batch)
            self.listener.batch_discarded(batch, reason)

    def shut_down(self) -> None:
        """Shutdown without a spool: what is left is given up (``Outcomes`` in the route layer),
        and the connection goes."""
        self.seal()  # Pipeline.seal_all: journalled as sealed before it is given up
        for batch in self.producer.take_all():
            self.listener.batch_discarded(batch, reasons.given_up(reasons.SHUTDOWN, batch))
        self.tick()  # a clean stop records what settled
        self.drop_connection(processed=0)

    def shut_down_to_spool(self) -> list[SpooledBatch]:
        """Shutdown with a spool: what is left goes to the spool's front as the shutdown
        writes it (``service/shutdown.py``), the journal goes (a clean stop), and so does the
        connection; returns the front as the next run reads it."""
        self.seal()
        front, _, _ = spool_records_of([self.topic])
        forget_buffered([self.topic])
        self.journal.close()
        self.drop_connection(processed=0)
        self.broker.refused.clear()  # the refusals it read die with it (the spool has none)
        return [
            records.decode_batch(body, kind)
            for kind, body in records.iter_records(b"".join(front))
        ]

    def crash(self) -> Process:
        """A second passes (the journal records what settled), then the process is killed
        (its connection's unprocessed Sends are lost); the next run starts from its journal."""
        self.tick()
        self.kill()
        return Process(self.journal.directory, self.outcomes, self.broker, self.max_attempts)

    def kill(self) -> None:
        """The process dies: its connection is gone, its journal's file closed as it was."""
        self.drop_connection(processed=0)
        self.broker.refused.clear()  # the refusals it read die with it (the journal has none)
        fd = self.journal.files._fd  # what the kernel closes for a killed process
        if fd >= 0:
            os.close(fd)
            self.journal.files._fd = -1

    def settle_all(self, rounds: int = 200) -> None:
        """The bookie recovers; connect and answer until nothing is left to send."""
        broker = self.broker
        for _ in range(rounds):
            broker.persist(len(broker.bookie))
            if not self.connected:
                self.reconnect()
            while broker.queue or broker.answers:
                if broker.queue:
                    broker.process()
                broker.persist(len(broker.bookie))
                self.read_all()
            self.producer.seal()
            self.flush()
            if not self.producer.pending and not broker.queue and self.connected:
                return
        raise AssertionError(f"not settled: {len(self.producer.pending)} batches pending")


def new_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="pulsar-bruce-ids-"))
