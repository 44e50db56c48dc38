"""A broker that fails the way pulsar-broker over BookKeeper does, for the lifecycle model. Sans-IO.

One topic, one connection at a time.  Each step is one thing the Java broker
can do on its own schedule, so a hypothesis machine can interleave them:

- :meth:`Broker.process` takes the oldest Send written and judges it as
  ``Producer.publishMessage`` and ``PersistentTopic.publishMessage`` do: the
  checksum (``Producer.checkAndStartPublish``: ``ChecksumError``, nothing
  pushed, the Sends behind it go on), the topic's own size limit
  (``isExceedMaximumMessageSize``: ``NotAllowedError``), then deduplication
  (``MessageDeduplication.isDuplicate``: a receipt for -1:-1, or
  ``MessageDupUnknownException`` answered as ``PersistenceError`` while the
  earlier write of those ids is pushed and not persisted).  A Send that is not
  a duplicate is *pushed* and handed to the bookie: it is not stored yet.
- :meth:`Broker.persist` completes the oldest writes (``ManagedLedgerImpl``
  completes adds in order; ``PersistentTopic.addComplete`` ->
  ``recordMessagePersisted``): stored, and a receipt on the connection that
  wrote it, if that connection is still there (otherwise the receipt is lost).
- :meth:`Broker.fail_bookie` fails every write still pending
  (``PersistentTopic.addFailed`` fences the topic: the writes behind a failed
  one fail too, and un-fencing calls ``resetHighestSequenceIdPushed``).
- :meth:`Broker.drop_connection` loses the connection: the Sends not processed
  are gone, the receipts not read are gone, the bookie's writes go on (the
  refusals are read first: :meth:`Broker.judge_before_drop`).
- :meth:`Broker.close_producer` is ``ServerCnx.handleCloseProducer``: answered
  only once every write the producer pushed is complete (``Producer.close``).
- Re-registration answers ``last_sequence_id`` from the *pushed* id
  (``PersistentTopic.getLastPublishedSequenceId``).
- A sender's other attempt (a retried Spark task) stores the sender's ids under
  the same name while our producer is away (:meth:`other_attempt_stores`).
- A non-persistent topic keeps no ids and drops a Send under load
  (``ServerCnx.handleSend``: a receipt for -1:-1, nothing stored).

Every message is a distinct value, so what was stored and what the daemon
counted can be compared message by message; :attr:`Broker.refused` records,
per value, the writes whose refusal the daemon read.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass

from pulsar_bruce.batch.compression import decompress
from pulsar_bruce.frame import pulsar_api_pb2 as pb
from pulsar_bruce.frame.codec import Frame
from pulsar_bruce.producer.faults import NOT_STORED
from pulsar_bruce.producer.topic_size import TOPIC_SIZE_TEXT

from tests.support.fake_dedup import Deduplication, DupStatus, Publish
from tests.unit.daemon.spool.test_journal import values_of as values_in

TOPIC = "persistent://public/default/ids"
NON_PERSISTENT_TOPIC = "non-persistent://public/default/ids"
NAME = "edge-host-1"
PRODUCER_ID = 3
#: ``MessageDeduplication.MessageDupUnknownException``'s text, as the SendError carries it.
DUP_UNKNOWN_TEXT = "Cannot determine whether the message is a duplicate at this time"


def send_error(sequence_id: int, error: int, message: str) -> pb.BaseCommand:
    """A ``SendError`` as the Java broker writes it (naming the batch's highest id)."""
    failed = pb.CommandSendError(
        producer_id=PRODUCER_ID, sequence_id=sequence_id, error=error, message=message
    )
    return pb.BaseCommand(type=pb.BaseCommand.SEND_ERROR, send_error=failed)


def receipt(sequence_id: int, highest: int, ledger: int, entry: int) -> pb.BaseCommand:
    return pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
        producer_id=PRODUCER_ID, sequence_id=sequence_id, highest_sequence_id=highest,
        message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry)))  # fmt: skip


@dataclass
class Written:
    """One Send: its frame, its values, the connection that carried it (-1: another process's
    write, whose answers go elsewhere), and what deduplication reads of it."""

    number: int
    frame: Frame | None
    values: list[bytes]
    connection: int
    publish: Publish

    @property
    def top(self) -> int:
        return self.publish.top


@dataclass
class Answer:
    """An answer waiting on the connection, and the write it answers."""

    command: pb.BaseCommand
    write: Written | None


class Broker:
    """The broker's side of one topic and the producer name ``NAME``."""

    def __init__(self, *, persistent: bool = True, persist_at_once: bool = True) -> None:
        self.topic = TOPIC if persistent else NON_PERSISTENT_TOPIC
        self.persistent = persistent
        #: Old rig behaviour: every Send the bookie takes is persisted at once.
        self.persist_at_once = persist_at_once
        self.dedup = Deduplication()
        self.stored: Counter[bytes] = Counter()
        #: What of ``stored`` a sender's other attempt stored (not the daemon's copies).
        self.stored_by_other: Counter[bytes] = Counter()
        #: (sequence id, highest sequence id) of every Send stored, in order.
        self.stored_ids: list[tuple[int, int]] = []
        #: The sequence id each message was stored under (its entry's own).
        self.id_of: dict[bytes, int] = {}
        #: Sends written on the current connection and not processed yet, in order.
        self.queue: list[Written] = []
        #: Answers written on the current connection and not read yet, in order.
        self.answers: list[Answer] = []
        #: Writes pushed and handed to the bookie, not yet complete, in order.
        self.bookie: list[Written] = []
        #: The topic's own max message size (``PersistentTopic.isExceedMaximumMessageSize``).
        self.topic_limit = 1 << 30
        #: The next Send processed fails its checksum (corrupted on the way).
        self.corrupt_next = False
        #: The next Send processed on a non-persistent topic is dropped under load.
        self.overloaded = False
        #: Per value: numbers of the writes carrying it, and of those whose refusal was read.
        self.writes: defaultdict[bytes, set[int]] = defaultdict(set)
        self.refused: defaultdict[bytes, set[int]] = defaultdict(set)
        self.connection = 0
        #: The highest sequence id the daemon ever wrote.
        self.highest_written = -1
        #: The chunks written so far of a message cut in chunks.
        self._chunks: list[Frame] = []
        #: Per chunked message (uuid): the chunk a consumer takes next (``ConsumerImpl``
        #: assembles chunks in the order stored; chunk 0 starts over, a gap spoils it).
        self._assembly: dict[str, int] = {}
        self._numbers = itertools.count()
        self._entry = 0

    # -- the daemon's side of the wire ---------------------------------------------------

    def write(self, frame: Frame) -> None:
        """The daemon wrote a Send on the current connection: a batch, or one chunk of a
        message cut in chunks (its value counts with its last chunk, which deduplication
        judges: ``Publish.checked``)."""
        assert frame.metadata is not None
        md = frame.metadata
        if frame.command.send.is_chunk:  # the daemon writes a message's chunks together
            self._chunks.append(frame)
            if md.chunk_id < md.num_chunks_from_msg - 1:
                return
            frames, self._chunks = self._chunks, []
            whole = b"".join(f.payload for f in frames)
            values = [decompress(md.compression, whole, md.uncompressed_size)]
        elif md.HasField("num_messages_in_batch"):
            frames = [frame]
            values = values_in(decompress(md.compression, frame.payload, md.uncompressed_size))
        else:  # a single message: its value is the payload
            frames = [frame]
            values = [decompress(md.compression, frame.payload, md.uncompressed_size)]
        for each in frames:
            publish = Publish.of(self.topic, NAME, each)
            written = Written(next(self._numbers), each, values, self.connection, publish)
            self.highest_written = max(self.highest_written, written.top)
            for value in values:
                self.writes[value].add(written.number)
            self.queue.append(written)

    def read(self) -> pb.BaseCommand:
        """The daemon reads the oldest answer."""
        answer = self.answers.pop(0)
        if answer.write is not None and answer.command.type == pb.BaseCommand.SEND_ERROR:
            for value in answer.write.values:
                self.refused[value].add(answer.write.number)
        return answer.command

    def may_be_stored(self, value: bytes) -> bool:
        """Whether the daemon can know ``value`` is not stored: false only when it read a
        refusal of every write that carried it."""
        return bool(self.writes[value] - self.refused[value])

    # -- the broker's own steps ----------------------------------------------------------

    def last_sequence_id(self) -> int:
        return self.dedup.last_sequence_id(self.topic, NAME)

    def process(self) -> None:
        """Judge the oldest Send written (see the module's docstring)."""
        written = self.queue.pop(0)
        frame, publish = written.frame, written.publish
        assert frame is not None
        send, highest = frame.command.send, written.top
        if self.corrupt_next:
            self.corrupt_next = False
            self._answer(send_error(highest, pb.ChecksumError, "Checksum failed"), written)
            return
        if len(frame.payload) > self.topic_limit:
            self._answer(send_error(highest, pb.NotAllowedError, TOPIC_SIZE_TEXT), written)
            return
        if not self.persistent:
            if self.overloaded:
                self.overloaded = False
                self._answer(receipt(send.sequence_id, send.highest_sequence_id,
                                     NOT_STORED, NOT_STORED), written)  # fmt: skip
            else:
                self._store(written)
            return
        status = self.dedup.is_duplicate(publish)
        if status is DupStatus.UNKNOWN:
            self._answer(send_error(highest, pb.PersistenceError, DUP_UNKNOWN_TEXT), written)
        elif status is DupStatus.DUP:
            self._answer(receipt(send.sequence_id, send.highest_sequence_id,
                                 NOT_STORED, NOT_STORED), written)  # fmt: skip
        else:
            self.bookie.append(written)
            if self.persist_at_once:
                self.persist(1)

    def persist(self, writes: int) -> None:
        """The bookie completes the oldest ``writes`` writes, in order."""
        for _ in range(min(writes, len(self.bookie))):
            self._store(self.bookie.pop(0))

    def fail_bookie(self) -> None:
        """Every pending write fails: the topic is fenced, pushed ids fall back to persisted."""
        for written in self.bookie:
            if written.connection == self.connection:
                self._answer(send_error(written.top, pb.PersistenceError, "topic fenced"), written)
        self.bookie.clear()
        self.dedup.reset_pushed()

    def judge_before_drop(self, processed: int) -> list[pb.BaseCommand]:
        """The connection is about to go: ``processed`` more Sends are judged; the refusals not
        read yet are taken out for the daemon to read first.  A refusal lost with its
        connection while a later batch is stored is a loss no client can see (the broker then
        takes the refused ids for duplicates), so the model leaves that path out
        (docs/delivery.md, what is not covered)."""
        for _ in range(min(processed, len(self.queue))):
            self.process()
        error = pb.BaseCommand.SEND_ERROR
        receipts = [a for a in self.answers if a.command.type != error]
        self.answers = [a for a in self.answers if a.command.type == error]
        refusals = [self.read() for _ in range(len(self.answers))]
        self.answers = receipts
        return refusals

    def drop_connection(self) -> None:
        """The connection is gone: the Sends not judged and the answers not read with it; the
        bookie's writes go on."""
        self.queue.clear()
        self.answers.clear()
        self.connection += 1

    def close_producer(self) -> bool:
        """``CloseProducer``: answered (True) once every Send written is judged and every write
        of this connection is complete; False while the bookie holds one."""
        while self.queue:
            self.process()
        return not any(w.connection == self.connection for w in self.bookie)

    def someone_else_wrote(self, ids: int) -> None:
        """Another process produced ``ids`` messages under our name (two daemons, one name),
        numbered above any id the daemon wrote (else they could take ours: not covered)."""
        top = max(self.last_sequence_id(), self.highest_written) + ids
        self.dedup.written(Publish(self.topic, NAME, top, top))

    def other_attempt_stores(self, values: list[bytes]) -> None:
        """A sender's other attempt writes its messages ``values`` (the n-th under id n) under
        the sender's name, in one Send after the broker's last id, and waits for its receipt:
        the bookie completes the writes it held before, then this one."""
        first = self.last_sequence_id() + 1
        if first >= len(values):
            return
        publish = Publish(self.topic, NAME, first, len(values) - 1)
        assert self.dedup.is_duplicate(publish) is DupStatus.NOT_DUP
        self.bookie.append(Written(next(self._numbers), None, values[first:], -1, publish))
        self.persist(len(self.bookie))

    # -- inside --------------------------------------------------------------------------

    def _delivered(self, written: Written) -> bool:
        """Whether storing ``written`` gives a consumer its messages: any batch; a chunk only
        when it is the last and the chunks before it were stored in order."""
        if written.frame is None or not written.frame.command.send.is_chunk:
            return True
        md = written.frame.metadata
        assert md is not None
        expected = self._assembly.get(md.uuid, 0)
        expected = 1 if md.chunk_id == 0 else (expected + 1 if md.chunk_id == expected else -1)
        self._assembly[md.uuid] = expected
        return expected == md.num_chunks_from_msg

    def _answer(self, command: pb.BaseCommand, written: Written) -> None:
        if written.connection == self.connection:
            self.answers.append(Answer(command, written))

    def _store(self, written: Written) -> None:
        publish = written.publish
        if self.persistent:
            self.dedup.persisted(publish)
        if self._delivered(written):
            self.stored.update(written.values)
            if written.connection < 0:
                self.stored_by_other.update(written.values)
            for offset, value in enumerate(written.values):
                self.id_of[value] = publish.sequence_id + offset
        self.stored_ids.append((publish.sequence_id, publish.top))
        self._entry += 1
        command = receipt(publish.sequence_id, publish.top, 1, self._entry)
        self._answer(command, written)
