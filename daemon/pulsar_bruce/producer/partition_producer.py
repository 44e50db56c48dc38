"""One Pulsar producer per (topic, partition): open batch, pending queue, receipts. Sans-IO.

Modelled on pulsar-client-go's ``producer_partition.go``: sealed batches wait
in one FIFO (``pending``); the first ``in_flight`` of them have been written to
the current connection.  Receipts must match the head of the FIFO.  When the
connection goes away, or the producer is closed and re-created, every pending
batch is written again, in order, before anything new (and counted as a
possible duplicate if it had been sent before).  A broker error names a batch by
its highest sequence id, so errors are matched by id range, anywhere in flight.

The queue and its sequence ids belong to :class:`~.batch_queue.BatchQueue`
(``queue``), which keeps their rules; this class decides what is framed when.
Ids are given to a batch the first time it is sent (the producer name and the
broker's ``last_sequence_id`` are only known then; a sender's at seal) and
never change, so a broker with deduplication drops resent copies.

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

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import BatchBuilder
from pulsar_bruce.batch.compression import CompressionTries, Compressor
from pulsar_bruce.batch.encryption import EncryptionError, Encryptor
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.schema import NO_SCHEMA, ProducerSchema
from pulsar_bruce.parse.deliver_at import is_delayed
from pulsar_bruce.producer.batch_queue import BatchQueue
from pulsar_bruce.producer.framing import SEND_FRAME_OVERHEAD, frame_batch, frame_single
from pulsar_bruce.producer.partition_state import PartitionState
from pulsar_bruce.producer.receipt_match import ReceiptMatch
from pulsar_bruce.producer.sequence_ids import Renumbered

__all__ = ["SEND_FRAME_OVERHEAD", "BatchPolicy", "Outgoing", "PartitionProducer", "ReceiptMatch"]


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
    #: broker, failed by the broker ``max_attempts`` times already, or a sender's batch
    #: refused while a later one was stored (``BatchQueue.release``).
    rejected: list[tuple[SealedBatch, str]] = field(default_factory=list)
    #: Parts of batches split at their first send (too large for a frame), each with the
    #: batch it is a part of (itself maybe a part): the journal's parts replace its whole.
    split_from: dict[SealedBatch, SealedBatch] = field(default_factory=dict)
    #: Batches renumbered after a refusal that an earlier write may have stored: their
    #: write under new ids may store them twice (reported as possible duplicates).
    possibly_stored: list[SealedBatch] = field(default_factory=list)


class PartitionProducer:
    """Batching and delivery state of one partition's producer."""

    __slots__ = (
        "_max_batch_bytes",
        "batch",
        "closing",
        "compression_tries",
        "max_message_size",
        "name",
        "name_is_ours",
        "partition",
        "policy",
        "producer_id",
        "queue",
        "retiring",
        "schema_version",
        "state",
        "topic",
    )

    def __init__(self, topic: str, partition: int, producer_id: int, policy: BatchPolicy):
        self.topic = topic  # the name the broker knows: ``...-partition-N`` or the topic itself
        self.partition = partition
        self.producer_id = producer_id
        self.policy = policy
        self.batch = BatchBuilder()
        #: What the intake reads of this producer (``ready``, ``available``, the open batch,
        #: the batching limits): kept current here, whenever one of them changes.
        self.state = PartitionState(self.batch, self)
        #: The sealed batches and their ids: read them here, change them through its methods.
        self.queue = BatchQueue()
        #: Being closed on the broker (to be re-created): nothing is written, receipts still count.
        self.closing = False
        self.name: str | None = None
        #: True when ``name`` is ours (stable across restarts), not the broker's choice.
        self.name_is_ours = False
        self._max_batch_bytes = policy.max_bytes
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._limits_changed()
        self.compression_tries = CompressionTries()
        #: The broker's version of our schema (``ProducerSuccess``), stamped on what is framed.
        self.schema_version = b""
        #: Its sender is gone: closed on the broker once nothing is left to settle.
        self.retiring = False

    @property
    def ready(self) -> bool:
        """Registered on its connection: writes, and takes new messages."""
        return self.state.ready

    @ready.setter
    def ready(self, ready: bool) -> None:
        self.state.ready = ready

    @property
    def available(self) -> bool:
        """For PartitionKey routing (Bruce's "available"): ready, or being created or
        re-created and not yet failed; the driver clears it when the partition cannot be
        reached or stays away past the failover grace, and :meth:`on_registered` sets it."""
        return self.state.available

    @available.setter
    def available(self, available: bool) -> None:
        self.state.available = available

    @property
    def max_batch_bytes(self) -> int:
        """The policy's limit, lowered to what fits the broker's max message size (changed by
        :meth:`set_policy` and :meth:`limit_batch_bytes` only, which keep the state current)."""
        return self._max_batch_bytes

    def _limits_changed(self) -> None:
        self.state.limits(self._max_batch_bytes, self.policy.max_messages, self.policy.key_based)

    # -- batching -------------------------------------------------------------

    def seal(self) -> SealedBatch | None:
        """Close the open batch (if any: one per key with key-based batching) and queue it for
        sending; returns the last batch queued."""
        if self.batch.count == 0:
            return None
        return self.queue.seal(self.batch)[-1]

    def replay(self, batch: SealedBatch) -> None:
        """Queue a batch back from the spool or the journal (see :meth:`BatchQueue.replay`)."""
        self.queue.replay(batch, self.name, self.name_is_ours)

    def name_as(self, name: str) -> None:
        """Register under our own stable ``name`` (``--producer-name-prefix``), so that broker
        deduplication recognises a replay after a restart."""
        self.name, self.name_is_ours = name, True

    def retire(self) -> None:
        """Its sender is gone: closed on the broker once nothing is left to settle."""
        self.retiring = True

    def limit_batch_bytes(self, limit: int) -> None:
        """Keep batches at most ``limit`` bytes (the topic's own size limit, learnt)."""
        self._max_batch_bytes = min(self._max_batch_bytes, limit)
        self._limits_changed()

    def publish_as(self, sender: str, first_sequence_id: int) -> None:
        """Publish under a stream sender's name and ids (``exactly_once.py``): ids are given
        at seal, from ``first_sequence_id``, and never renumbered."""
        self.name, self.name_is_ours = sender, True
        self.queue.number_from(sender, first_sequence_id)

    @property
    def pending(self) -> deque[SealedBatch]:
        """Read only (see :class:`BatchQueue`)."""
        return self.queue.pending

    @property
    def in_flight(self) -> int:
        return self.queue.in_flight

    @property
    def next_sequence_id(self) -> int:
        return self.queue.next_sequence_id

    @property
    def exactly_once(self) -> bool:
        return self.queue.exactly_once

    @property
    def has_unsent(self) -> bool:
        return self.ready and self.queue.has_unsent

    # -- connection lifecycle -------------------------------------------------

    def on_registered(
        self,
        name: str,
        last_sequence_id: int,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        schema_version: bytes = b"",
    ) -> Renumbered | None:
        """The broker accepted the producer (``ProducerSuccess``); returns what was renumbered."""
        self.name = name
        self.schema_version = schema_version
        self.max_message_size = max_message_size
        self.set_policy(self.policy)
        renumbered = self.queue.registered(last_sequence_id)
        self.ready = True
        self.available = True
        self.closing = False
        return renumbered

    def set_policy(self, policy: BatchPolicy) -> None:
        """New batching rules (configuration reload); the open batch keeps its messages."""
        self.policy = policy
        self._max_batch_bytes = min(policy.max_bytes, self.max_message_size - SEND_FRAME_OVERHEAD)
        self._limits_changed()

    def on_disconnected(self) -> None:
        """The connection (or the broker's producer) is gone; everything pending goes again."""
        self.ready = False
        self.closing = False
        self.queue.connection_lost()

    def on_closed(self) -> None:
        """The broker answered our ``CloseProducer``: a batch it has not answered by then was
        not taken (``Producer.close`` waits for every publish in progress)."""
        self.queue.closed()

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
        queue = self.queue
        if not self.ready or (queue.refused and not queue.releasable):
            return out  # a refused batch waits for the answers to the batches after it
        if queue.refused:
            queue.release()
        if queue.failed_back or queue.possibly_stored:
            out.rejected += queue.failed_back
            out.possibly_stored += queue.possibly_stored
            queue.failed_back, queue.possibly_stored = [], []
        pending = queue.pending
        limit = max_frame_size - SEND_FRAME_OVERHEAD
        index = queue.in_flight
        while index < len(pending):
            batch = pending[index]
            if not batch.frame and queue.exactly_once:
                queue.split_stored(index)
                batch = pending[index]
            if not batch.frame:  # first send (a batch from the spool may keep its ids)
                queue.assign(batch)
                try:
                    if batch.count == 1 and (
                        len(batch.payload) > limit or is_delayed(batch.payload, 4)
                    ):  # too large for a batch, or delayed: never batched
                        framed = frame_single(self, batch, publish_time_ms, max_frame_size)
                    else:
                        framed = frame_batch(self, batch, publish_time_ms, limit)
                        if not framed and batch.count > 1:
                            queue.split(index)
                            out.split_from[pending[index]] = batch
                            out.split_from[pending[index + 1]] = batch
                            continue
                        if not framed:
                            framed = frame_single(self, batch, publish_time_ms, max_frame_size)
                except EncryptionError:  # discarded, never sent in plaintext instead
                    out.rejected.append((queue.remove_unsent(index), reasons.ENCRYPTION_FAILED))
                    continue
                if not framed:
                    out.rejected.append((queue.remove_unsent(index), reasons.TOO_LARGE))
                    continue
            elif batch.send_attempts:
                if max_attempts and batch.failed_sends >= max_attempts:
                    why = reasons.given_up(reasons.RETRIES_EXHAUSTED, batch)
                    out.rejected.append((queue.remove_unsent(index), why))
                    continue
                out.resent_messages += batch.count
            batch.receipts = batch.chunks_refused = 0  # every chunk goes (again) on it
            batch.send_attempts += 1
            out.frames.append(batch.frame)
            out.batches.append(batch)
            index += 1
        queue.written()
        return out

    # -- receipts -------------------------------------------------------------

    def on_receipt(self, sequence_id: int) -> tuple[ReceiptMatch, SealedBatch | None]:
        """Match a ``SendReceipt`` against the in-flight batches (:meth:`BatchQueue.receipt`)."""
        return self.queue.receipt(sequence_id, self.closing)

    def in_flight_batch(self, sequence_id: int) -> SealedBatch | None:
        """The in-flight batch whose sequence id range contains ``sequence_id``, if any."""
        return self.queue.in_flight_batch(sequence_id)

    def reject(self, sequence_id: int) -> SealedBatch | None:
        """Remove the in-flight batch a ``SendError`` names."""
        return self.queue.reject(sequence_id)

    def holds_ids(self, batch: SealedBatch) -> bool:
        """Whether ``batch``'s ids are its own to offer a later run (the spool at shutdown):
        not when it has none, nor when the broker refused it while later batches may be
        stored (it waits to go under new ids; the journal records the same, ``refused``)."""
        return batch.sequence_id >= 0 and self.queue.replacing(batch) is None

    def refuse(self, batch: SealedBatch, replacement: list[SealedBatch]) -> None:
        """See :meth:`BatchQueue.refuse`."""
        self.queue.refuse(batch, replacement)

    def expire(self, deadline: float) -> list[SealedBatch]:
        """Remove the batches (oldest first) created before ``deadline``: their send timed out."""
        return self.queue.expire(deadline)

    def take_all(self) -> list[SealedBatch]:
        """Remove every batch (open and pending) for discarding; the producer is finished."""
        self.seal()
        return self.queue.take_all()

    def check(self) -> None:
        """Assert the producer's rules (for tests, after every step)."""
        self.queue.check()
        assert self.batch.count >= 0
        assert self.max_batch_bytes <= self.policy.max_bytes
        if self.exactly_once:
            assert self.name == self.queue.sender and self.name_is_ours

    @property
    def buffered_messages(self) -> int:
        return self.batch.count + sum(b.count for b in self.pending)
