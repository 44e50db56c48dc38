"""One Pulsar producer per (topic, partition): open batch, pending queue, receipts. Sans-IO.

Modelled on pulsar-client-go's ``producer_partition.go``: sealed batches wait
in one FIFO (``pending``); the first ``in_flight`` of them have been written to
the current connection.  Receipts must match the head of the FIFO.  When the
connection goes away, or the producer is closed and re-created, every pending
batch is written again, in order, before anything new (and counted as a
possible duplicate if it had been sent before).  A broker error names a batch by
its highest sequence id, so errors are matched by id range, anywhere in flight.

Sequence ids are given to a batch the first time it is sent (the producer name
and the broker's ``last_sequence_id`` are only known then) and never change, so
a broker with deduplication drops resent copies.

A message too large for one Send frame is a batch of its own (the appender
seals around it) and goes out as one non-batched message cut into chunks, like
pulsar-client-java's ``ProducerImpl`` with chunking enabled: every chunk
carries the message's sequence id, the broker acknowledges each, and the batch
is acked with the last receipt.  Its entries stay in ``payload`` (the spool
and the discard log read them there), its chunk frames in ``frame``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import BatchBuilder, split_batch
from pulsar_bruce.batch.compression import CompressionTries, Compressor
from pulsar_bruce.batch.encryption import EncryptionError, Encryptor
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.schema import NO_SCHEMA, ProducerSchema
from pulsar_bruce.parse.deliver_at import is_delayed
from pulsar_bruce.producer.exactly_once import number_sealed, take_stored
from pulsar_bruce.producer.framing import SEND_FRAME_OVERHEAD, frame_batch, frame_single
from pulsar_bruce.producer.sequence_ids import Renumbered, renumber_above


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """When an open batch is sealed, how it is compressed, and the schema the producer declares."""

    max_messages: int = 1000
    max_bytes: int = 128 * 1024
    max_delay_s: float = 0.010
    compression: int = 0
    compressor: Compressor | None = None
    #: One key per batch, carried in the batch's metadata (``--key-based-batching``).
    key_based: bool = False
    #: Declared when the producer is (re)created (``--schema``).
    schema: ProducerSchema = NO_SCHEMA
    #: Seals each batch after compression (``--encryption-keys``; None: sent as it is).
    encryptor: Encryptor | None = None


@dataclass(slots=True)
class Outgoing:
    """What :meth:`PartitionProducer.frames_to_send` hands the I/O edge."""

    frames: list[bytes] = field(default_factory=list)
    batches: list[SealedBatch] = field(default_factory=list)
    #: Messages in ``batches`` that had been sent before (possible duplicates).
    resent_messages: int = 0
    #: Batches removed from the queue, with the discard reason: too large for the
    #: broker, or failed by the broker ``max_attempts`` times already.
    rejected: list[tuple[SealedBatch, str]] = field(default_factory=list)
    #: Sender-numbered batches (or their first parts) the broker already has: not written.
    already_stored: list[SealedBatch] = field(default_factory=list)


class ReceiptMatch(Enum):
    ACKED = "acked"
    #: A receipt for a batch we already consider done (an old duplicate), or one that
    #: comes while the producer is being closed anyway: ignore it.
    STALE = "stale"
    #: The receipt of one chunk of a chunked message, not its last: the message waits.
    CHUNK = "chunk"
    #: A receipt that matches nothing we expect: the producer's state is unknown, re-create it.
    MISMATCH = "mismatch"


class PartitionProducer:
    """Batching and delivery state of one partition's producer."""

    __slots__ = (
        "available",
        "batch",
        "closing",
        "compression_tries",
        "exactly_once",
        "in_flight",
        "issued_from",
        "max_batch_bytes",
        "max_message_size",
        "name",
        "name_is_ours",
        "next_sequence_id",
        "partition",
        "pending",
        "policy",
        "producer_id",
        "ready",
        "retiring",
        "schema_version",
        "stored_up_to",
        "topic",
        "unjournalled",
    )

    def __init__(self, topic: str, partition: int, producer_id: int, policy: BatchPolicy):
        self.topic = topic  # the name the broker knows: ``...-partition-N`` or the topic itself
        self.partition = partition
        self.producer_id = producer_id
        self.policy = policy
        self.batch = BatchBuilder()
        self.pending: deque[SealedBatch] = deque()
        self.in_flight = 0
        self.ready = False
        #: For PartitionKey routing (Bruce's "available"): ready, or being created or
        #: re-created and not yet failed; the driver clears it when the partition cannot be
        #: reached or stays away past the failover grace, and :meth:`on_registered` sets it.
        self.available = True
        #: Being closed on the broker (to be re-created): nothing is written, receipts still count.
        self.closing = False
        self.name: str | None = None
        #: True when ``name`` is ours (stable across restarts), not the broker's choice.
        self.name_is_ours = False
        self.next_sequence_id = 0
        #: The first sequence id this process gave a batch (-1: none yet); a batch replayed from
        #: the spool whose kept ids reach into ours must be renumbered (``keep_sequence_ids``).
        self.issued_from = -1
        #: The policy's limit, lowered to what fits the broker's max message size.
        self.max_batch_bytes = policy.max_bytes
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.compression_tries = CompressionTries()
        #: With a write-ahead journal: batches queued since it last looked (None: no journal).
        self.unjournalled: list[SealedBatch] | None = None
        #: The broker's version of our schema (``ProducerSuccess``), stamped on what is framed.
        self.schema_version = b""
        #: Publishing under a sender's name and ids (``exactly_once.py``): ids are given at
        #: seal, from ``next_sequence_id``, and never renumbered.
        self.exactly_once = False
        #: The broker's last stored id under our name, from registration (-1: none known).
        self.stored_up_to = -1
        #: Its sender is gone: closed on the broker once nothing is left to settle.
        self.retiring = False

    # -- batching -------------------------------------------------------------

    def seal(self) -> SealedBatch | None:
        """Close the open batch (if any: one per key with key-based batching) and queue it for
        sending; returns the last batch queued."""
        if self.batch.count == 0:
            return None
        pending = self.pending
        queued = len(pending)
        last = self.batch.seal_into(pending)
        if self.exactly_once:
            number_sealed(self, queued)
        if self.unjournalled is not None:
            self.unjournalled.extend(pending[index] for index in range(queued, len(pending)))
        return last

    @property
    def has_unsent(self) -> bool:
        return self.ready and len(self.pending) > self.in_flight

    # -- connection lifecycle -------------------------------------------------

    def on_registered(
        self, name: str, last_sequence_id: int, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    ) -> Renumbered | None:
        """The broker accepted the producer (``ProducerSuccess``); returns what was renumbered."""
        self.name = name
        self.max_message_size = max_message_size
        self.set_policy(self.policy)
        renumbered = None
        if self.exactly_once:  # the sender's ids: what the broker has is taken out, not renumbered
            self.stored_up_to = last_sequence_id
        else:
            renumbered = renumber_above(self, last_sequence_id)
        self.ready = True
        self.available = True
        self.closing = False
        self.in_flight = 0
        return renumbered

    def set_policy(self, policy: BatchPolicy) -> None:
        """New batching rules (configuration reload); the open batch keeps its messages."""
        self.policy = policy
        self.max_batch_bytes = min(policy.max_bytes, self.max_message_size - SEND_FRAME_OVERHEAD)

    def on_disconnected(self) -> None:
        """The connection (or the broker's producer) is gone; everything pending goes again."""
        self.ready = False
        self.closing = False
        self.in_flight = 0

    def pause(self) -> None:
        """The producer is being closed on its connection: write nothing more until it is
        re-created, but take the receipts the broker still sends for what was written."""
        self.ready = False
        self.closing = True

    def frames_to_send(
        self,
        publish_time_ms: int,
        max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_attempts: int = 0,
    ) -> Outgoing:
        """Frames for every pending batch not yet written on this connection.

        A batch is compressed, numbered and framed the first time it goes out,
        and given up (``retries_exhausted``) once the broker failed it ``max_attempts`` times.
        Frames never exceed ``max_frame_size`` (the broker's negotiated
        ``max_message_size``): a batch that would is split in halves, and a
        single message that would is sent as chunks (or, if not even its
        metadata fits a frame, taken out and returned in ``rejected``).
        """
        out = Outgoing()
        if not self.ready:
            return out
        pending = self.pending
        limit = max_frame_size - SEND_FRAME_OVERHEAD
        index = self.in_flight
        while index < len(pending):
            batch = pending[index]
            if not batch.frame and self.exactly_once:
                stored = take_stored(self, index)
                if stored is not None:
                    out.already_stored.append(stored)
                    continue
            if not batch.frame:  # first send (a batch from the spool may keep its ids)
                try:
                    if batch.count == 1 and (
                        len(batch.payload) > limit or is_delayed(batch.payload, 4)
                    ):  # too large for a batch, or delayed: never batched
                        framed = frame_single(self, batch, publish_time_ms, max_frame_size)
                    else:
                        framed = frame_batch(self, batch, publish_time_ms, limit)
                        if not framed and batch.count > 1:
                            first, second = split_batch(batch)
                            pending[index] = first
                            pending.insert(index + 1, second)
                            continue
                        if not framed:
                            framed = frame_single(self, batch, publish_time_ms, max_frame_size)
                except EncryptionError:  # discarded, never sent in plaintext instead
                    del pending[index]
                    out.rejected.append((batch, reasons.ENCRYPTION_FAILED))
                    continue
                if not framed:
                    del pending[index]
                    out.rejected.append((batch, reasons.TOO_LARGE))
                    continue
            elif batch.send_attempts:
                if max_attempts and batch.failed_sends >= max_attempts:
                    del pending[index]
                    out.rejected.append((batch, reasons.RETRIES_EXHAUSTED))
                    continue
                out.resent_messages += batch.count
            batch.receipts = 0  # every chunk goes (again) on this connection
            batch.send_attempts += 1
            out.frames.append(batch.frame)
            out.batches.append(batch)
            index += 1
        self.in_flight = len(pending)
        return out

    # -- receipts -------------------------------------------------------------

    def on_receipt(self, sequence_id: int) -> tuple[ReceiptMatch, SealedBatch | None]:
        """Match a ``SendReceipt`` (it carries the batch's lowest id) against the in-flight queue.

        Receipts come in order, so normally only the head can match.  While the
        producer is closing, after the broker failed one batch, the batches
        behind it may still be confirmed: any in-flight batch can match then.
        """
        if self.in_flight == 0:
            # A receipt for a batch we gave up (send timeout) is old news, not a mismatch.
            stale = 0 <= sequence_id < self.next_sequence_id
            return (ReceiptMatch.STALE if stale else ReceiptMatch.MISMATCH), None
        head = self.pending[0]
        if sequence_id == head.sequence_id:
            if not self._last_receipt(head):
                return ReceiptMatch.CHUNK, None
            self.pending.popleft()
            self.in_flight -= 1
            return ReceiptMatch.ACKED, head
        if sequence_id < head.sequence_id:
            return ReceiptMatch.STALE, None
        if not self.closing:
            return ReceiptMatch.MISMATCH, None
        index = self._in_flight_index(sequence_id)
        if index is None or self.pending[index].sequence_id != sequence_id:
            return ReceiptMatch.STALE, None
        if not self._last_receipt(self.pending[index]):
            return ReceiptMatch.CHUNK, None
        return ReceiptMatch.ACKED, self._remove_in_flight(index)

    @staticmethod
    def _last_receipt(batch: SealedBatch) -> bool:
        """Count a receipt for ``batch``: True once every one of its frames has its receipt."""
        batch.receipts += 1
        return batch.receipts >= batch.frames

    def in_flight_batch(self, sequence_id: int) -> SealedBatch | None:
        """The in-flight batch whose sequence id range contains ``sequence_id``, if any."""
        index = self._in_flight_index(sequence_id)
        return None if index is None else self.pending[index]

    def reject(self, sequence_id: int) -> SealedBatch | None:
        """Remove the in-flight batch a ``SendError`` names.

        The Java broker answers a failed batch with ``max(highest_sequence_id,
        sequence_id)``, so the id is matched against each batch's range.
        """
        index = self._in_flight_index(sequence_id)
        return None if index is None else self._remove_in_flight(index)

    def resend_in_halves(self, batch: SealedBatch, halves: list[SealedBatch]) -> bool:
        """The broker refused the in-flight ``batch`` (over the topic's size limit): remove
        it and queue ``halves`` (its messages, under their ids) in its place; False when they
        cannot be sent (none, or see below) and ``batch`` is to be discarded.

        Nothing of ``batch`` was stored (the size check comes before deduplication,
        ``PersistentTopic.publishMessage``), but batches written after it may be, and
        the broker would then take lower ids for duplicates.  So the halves keep the
        ids when ``batch`` was the last written; otherwise our own name's halves are
        numbered afresh (like a new batch), and a sender's, whose ids are its own, cannot
        be sent (the Java client fails such a batch: ``recoverNotAllowedError``).
        """
        index = self._in_flight_index(batch.sequence_id)
        assert index is not None
        last = index == self.in_flight - 1
        self._remove_in_flight(index)
        if not halves or (not last and self.exactly_once):
            return False
        if not last:
            for half in halves:
                half.sequence_id, half.producer_name = -1, ""
            self.pending.extend(halves)
        else:
            self.pending.insert(index, halves[1])
            self.pending.insert(index, halves[0])
        return True

    def _in_flight_index(self, sequence_id: int) -> int | None:
        pending = self.pending
        for index in range(self.in_flight):
            batch = pending[index]
            if batch.sequence_id <= sequence_id <= batch.highest_sequence_id:
                return index
        return None

    def _remove_in_flight(self, index: int) -> SealedBatch:
        batch = self.pending[index]
        del self.pending[index]
        self.in_flight -= 1
        return batch

    def expire(self, deadline: float) -> list[SealedBatch]:
        """Remove the batches (oldest first) created before ``deadline``: their send timed out."""
        expired = []
        pending = self.pending
        while pending and 0 < pending[0].created_at < deadline:
            expired.append(pending.popleft())
            if self.in_flight:
                self.in_flight -= 1
        return expired

    def take_all(self) -> list[SealedBatch]:
        """Remove every batch (open and pending) for discarding; the producer is finished."""
        self.seal()
        batches = list(self.pending)
        self.pending.clear()
        self.in_flight = 0
        return batches

    @property
    def buffered_messages(self) -> int:
        return self.batch.count + sum(b.count for b in self.pending)
