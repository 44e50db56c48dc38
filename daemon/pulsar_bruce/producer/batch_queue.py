"""The sealed batches of one partition's producer and the sequence ids they go under. Sans-IO.

The one owner of the rules that keep broker deduplication (pulsar-broker
``MessageDeduplication.isDuplicate``: per producer name, a Send whose lowest id
is at most the highest id pushed is not stored) from dropping a message it never
stored, or storing one twice.  Nothing else writes the queue or the ids;
:meth:`BatchQueue.check` asserts the rules, and the tests call it after every step:

- **Ids rise along the queue.**  A batch is numbered once, here and nowhere
  else: at seal for a sender's ids (``exactly_once.py``), else when it is first
  framed (:meth:`BatchQueue.assign`, from ``next_sequence_id``; framing only
  reads the id); a replayed batch that keeps its ids goes before the unsent
  batches numbered after it.  Like ``ProducerImpl.resendMessages`` in
  pulsar-client-java, everything pending goes again, in order, under its ids.
- **A split keeps each message's id** (:meth:`BatchQueue.split` and
  :meth:`~.refusals.Refusals.refuse` hand the whole's ids to its parts), and
  its parts replace the batch in the write-ahead journal, at any depth and for
  any reason: the broker's max message size at the first send, the topic's own
  limit (:meth:`resend_in_halves`), the part of a sender's batch the broker has.
- **Renumbering** happens only at registration, when the broker's
  ``last_sequence_id`` is above every id we gave (``sequence_ids.renumber``,
  called from :meth:`BatchQueue.registered` only).
- The first ``in_flight`` batches are written on the current connection;
  receipts confirm them in order.
- **A refused batch keeps its ids only if nothing after it is stored**
  (``refusals.py``).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence

from pulsar_bruce.batch.batch_builder import BatchBuilder, split_batch, unframe
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.exactly_once import stored_part
from pulsar_bruce.producer.receipt_match import ReceiptMatch, last_receipt
from pulsar_bruce.producer.refusals import Refusals
from pulsar_bruce.producer.sequence_ids import Renumbered, highest_assigned, renumber


class BatchQueue(Refusals):
    """Pending batches in id order, the first ``in_flight`` written, and the next ids."""

    __slots__ = (
        "_fresh",
        "_in_flight",
        "_issued_from",
        "_next_id",
        "_pending",
        "_queued",
        "_stored_up_to",
        "sender",
    )

    def __init__(self) -> None:
        super().__init__()
        self._pending: deque[SealedBatch] = deque()
        self._in_flight = 0
        self._next_id = 0
        #: The first id this process gave a batch (-1: none yet); a replayed batch whose
        #: kept ids reach into ours is numbered afresh (see :meth:`replay`).
        self._issued_from = -1
        #: The broker's last id under the sender's name, from registration (-1: none known).
        self._stored_up_to = -1
        #: The sender whose name and ids the batches go under (None: the daemon's own).
        self.sender: str | None = None
        #: The batch :meth:`assign` last gave new ids, with ``_next_id`` and ``_issued_from``
        #: from before: given back if it is split or taken out before it is framed.
        self._fresh: tuple[SealedBatch, int, int] | None = None
        #: Batches queued since the last framing (:meth:`written`) or :meth:`take_queued`,
        #: each with the open batch it was sealed from (None: a replay).
        self._queued: list[tuple[SealedBatch, BatchBuilder | None]] = []

    # -- reading ----------------------------------------------------------------------------

    @property
    def pending(self) -> deque[SealedBatch]:
        """Read only: the batches, oldest (lowest ids) first."""
        return self._pending

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def next_sequence_id(self) -> int:
        return self._next_id

    @property
    def issued_from(self) -> int:
        return self._issued_from

    @property
    def exactly_once(self) -> bool:
        return self.sender is not None

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def has_unsent(self) -> bool:
        """Something to write: unsent batches, or refused ones all of whose later batches are
        answered; nothing new while a refused batch waits for those answers."""
        if self._refused:
            return self.releasable
        return len(self._pending) > self._in_flight or bool(self.failed_back)

    def take_queued(self) -> Sequence[tuple[SealedBatch, BatchBuilder | None]]:
        """The batches queued since the last framing or the last take, in order, each with the
        open batch it was sealed from (None: a replay): what the write-ahead journal must
        hold before they are framed (``spool/journal.py``)."""
        queued = self._queued
        if not queued:
            return ()  # (the journal asks after every drain: nothing made when nothing came)
        self._queued = []
        return queued

    # -- queueing ---------------------------------------------------------------------------

    def number_from(self, sender: str, first_id: int) -> None:
        """The batches go under ``sender``'s name and ids, given at seal from ``first_id``."""
        self.sender, self._next_id = sender, first_id

    def seal(self, builder: BatchBuilder) -> list[SealedBatch]:
        """Seal the open batch (one per key with key-based batching) into the queue; the
        batches queued, numbered now for a sender (in message order, ``exactly_once.py``)."""
        pending = self._pending
        queued = len(pending)
        keys = builder.keys
        sources = None if keys is None else list(keys.values())
        builder.seal_into(pending)
        sealed = list(itertools.islice(pending, queued, None))
        if sources is None:
            self._queued.append((sealed[0], builder))
        else:
            self._queued += zip(sealed, sources, strict=True)
        sender = self.sender
        if sender is not None:
            for batch in sealed:
                batch.sequence_id, batch.producer_name = self._next_id, sender
                self._next_id += batch.count
        return sealed

    def replay(self, batch: SealedBatch, name: str | None, name_is_ours: bool) -> None:
        """Queue a batch back from the spool or the journal, under its ids if it may keep them.

        Broker deduplication drops a replay whose ids it has (its receipt, for
        message id -1:-1, then confirms our earlier copy).  That needs the same
        producer name, and ids no batch of this run took: this run numbers from
        ``issued_from`` on (after the broker's ``last_sequence_id``, so an id below
        it is one the broker has); a replay reaching into this run's ids was never
        stored, and is numbered afresh, like a new batch.  A kept batch goes
        before the unsent batches numbered after it and those not numbered yet (a
        journal replays the halves of a batch split at its first send after
        batches journalled before them), and the next ids start after it.
        """
        pending = self._pending
        self._queued.append((batch, None))
        if batch.sequence_id < 0:
            pending.append(batch)
            return
        taken = self._issued_from >= 0 and (
            self._issued_from <= batch.highest_sequence_id and batch.sequence_id < self._next_id
        )
        if not name_is_ours or batch.producer_name != name or taken:
            batch.stored_before = not taken  # written by the last run, under another name
            batch.sequence_id, batch.producer_name = -1, ""
            pending.append(batch)
            return
        batch.stored_before = True  # the last run journalled it as written under these ids
        index = len(pending)
        while index > self._in_flight and (
            pending[index - 1].sequence_id < 0 or pending[index - 1].sequence_id > batch.sequence_id
        ):
            index -= 1
        pending.insert(index, batch)
        self._next_id = max(self._next_id, batch.highest_sequence_id + 1)

    # -- the connection ---------------------------------------------------------------------

    def registered(self, last_sequence_id: int) -> Renumbered | None:
        """The broker accepted the producer: nothing is written on the new connection yet.
        A sender's ids are its own (what the broker has is left to it to answer); ours are
        renumbered when the broker is past them (``sequence_ids.renumber``)."""
        self._in_flight = 0
        if self._refused:
            self.release()
        if self.sender is not None:
            self._stored_up_to = last_sequence_id
            for batch in self._pending:  # a written batch straddling it is cut before it goes
                if batch.frame and stored_part(batch, last_sequence_id):
                    unframe(batch)
            return None
        numbered = [batch for batch in self._pending if batch.sequence_id >= 0]
        ours = highest_assigned(numbered, self._next_id)
        if last_sequence_id <= ours or not numbered:
            self._next_id = max(ours, last_sequence_id) + 1
            return None
        if self._issued_from < 0:
            self._issued_from = last_sequence_id + 1
        self._next_id, renumbered = renumber(numbered, ours, last_sequence_id)
        return renumbered

    def closed(self) -> None:
        """The producer was closed on the broker: what it did not answer, it did not take."""
        self._in_flight = 0

    def connection_lost(self) -> None:
        """Nothing written is answered any more: a batch lost unanswered may be stored."""
        if self._refused:
            self._unanswered_may_be_stored()
        self._in_flight = 0

    # -- sending ----------------------------------------------------------------------------

    def assign(self, batch: SealedBatch) -> None:
        """Stamp the ids ``batch`` is framed under: its own, or the next ones (given back if
        it is then split or taken out unframed: :meth:`split`, :meth:`remove_unsent`)."""
        if batch.sequence_id < 0:
            self._fresh = (batch, self._next_id, self._issued_from)
            batch.sequence_id = self._next_id
            if self._issued_from < 0:
                self._issued_from = batch.sequence_id
        self._next_id = max(self._next_id, batch.highest_sequence_id + 1)

    def _give_back(self, batch: SealedBatch) -> None:
        """``batch`` was not framed under the ids :meth:`assign` just gave it: unnumbered
        again, and those ids go to the next batch, as if it had never been assigned."""
        fresh = self._fresh
        if fresh is not None and fresh[0] is batch and not batch.frame:
            batch.sequence_id, self._next_id, self._issued_from = -1, fresh[1], fresh[2]
        self._fresh = None

    def split(self, index: int, at: int = 0) -> None:
        """Replace the unsent ``pending[index]`` by its first ``at`` messages (0: half) and
        the rest, each message under its id, both replacing it in the journal."""
        assert index >= self._in_flight
        whole = self._pending[index]
        self._give_back(whole)
        first, rest = split_batch(whole, at)
        self._keep_ids(whole, (first, rest))
        self._pending[index] = first
        self._pending.insert(index + 1, rest)

    def split_stored(self, index: int) -> None:
        """A sender's unsent ``pending[index]`` straddles the broker's last id: cut it there,
        since the broker judges a batch by its lowest id and would drop the new messages
        with the stored ones.  Both parts are sent; the broker answers for the stored one
        (``ProducerImpl.resendMessages`` also lets the broker answer: its last id is the
        highest *pushed*, which a failed write may still take back)."""
        at = stored_part(self._pending[index], self._stored_up_to)
        if at:
            self.split(index, at)

    def remove_unsent(self, index: int) -> SealedBatch:
        """Take out an unsent batch that cannot be sent (too large, encryption failed)."""
        assert index >= self._in_flight
        batch = self._pending[index]
        self._give_back(batch)
        del self._pending[index]
        return batch

    def written(self) -> None:
        """Every pending batch is written on the current connection."""
        self._in_flight = len(self._pending)
        self._fresh = None
        self._queued.clear()  # the journal took them before framing, if there is one

    # -- answers ----------------------------------------------------------------------------

    def receipt(self, sequence_id: int, closing: bool) -> tuple[ReceiptMatch, SealedBatch | None]:
        """Match a ``SendReceipt`` (it carries the batch's lowest id) against the in-flight batches.

        Receipts come in order, so normally only the head can match.  While the
        producer is ``closing``, after the broker failed one batch, the batches
        behind it may still be confirmed: any in-flight batch can match then.
        """
        if self._refused and self.answered_refused(sequence_id, stored=True):
            return ReceiptMatch.STALE, None
        first = self._first_unanswered()
        if first is None:
            # A receipt for a batch we gave up (send timeout) is old news, not a mismatch.
            stale = 0 <= sequence_id < self._next_id
            return (ReceiptMatch.STALE if stale else ReceiptMatch.MISMATCH), None
        head = self._pending[first]
        if sequence_id == head.sequence_id:
            if not last_receipt(head):
                return ReceiptMatch.CHUNK, None
            if first == 0:
                self._pending.popleft()
                self._in_flight -= 1
                return ReceiptMatch.ACKED, head
            return ReceiptMatch.ACKED, self._acked(first)
        if sequence_id < head.sequence_id:
            return ReceiptMatch.STALE, None
        if not closing:
            return ReceiptMatch.MISMATCH, None
        index = self._in_flight_index(sequence_id)
        if index is None or self._pending[index].sequence_id != sequence_id:
            return ReceiptMatch.STALE, None
        if not last_receipt(self._pending[index]):
            return ReceiptMatch.CHUNK, None
        return ReceiptMatch.ACKED, self._acked(index)

    def in_flight_batch(self, sequence_id: int) -> SealedBatch | None:
        """The in-flight batch whose sequence id range contains ``sequence_id``, if any."""
        index = self._in_flight_index(sequence_id)
        return None if index is None else self._pending[index]

    def reject(self, sequence_id: int) -> SealedBatch | None:
        """Remove the in-flight batch whose id range holds ``sequence_id`` (the Java broker
        names a failed batch by ``max(highest_sequence_id, sequence_id)``)."""
        index = self._in_flight_index(sequence_id)
        return None if index is None else self._remove_in_flight(index)

    def expire(self, deadline: float) -> list[SealedBatch]:
        """Remove the batches (oldest first) created before ``deadline``: their send timed out."""
        expired = []
        pending = self._pending
        while pending and 0 < pending[0].created_at < deadline:
            batch = pending.popleft()
            expired.append(batch)
            if self._in_flight:
                self._in_flight -= 1
            self._refused.pop(batch, None)
        if expired and self._queued:  # not held on to (unsent while the broker is away)
            gone = set(expired)
            self._queued = [pair for pair in self._queued if pair[0] not in gone]
        return expired

    def take_all(self) -> list[SealedBatch]:
        """Remove every batch (to discard or spool it)."""
        batches = [batch for batch, _ in self.failed_back] + list(self._pending)
        self._pending.clear()
        self._queued.clear()
        self.failed_back.clear()
        self.possibly_stored.clear()
        self._in_flight = 0
        self._refused.clear()
        self._stored_top = -1
        return batches

    def _in_flight_index(self, sequence_id: int) -> int | None:
        """The unanswered in-flight batch whose ids hold ``sequence_id``."""
        pending = self._pending
        for index in range(self._in_flight):
            batch = pending[index]
            if batch.sequence_id <= sequence_id <= batch.highest_sequence_id:
                return index if batch not in self._refused else None
        return None

    def _first_unanswered(self) -> int | None:
        pending = self._pending
        for index in range(self._in_flight):
            if pending[index] not in self._refused:
                return index
        return None

    def _remove_in_flight(self, index: int) -> SealedBatch:
        batch = self._pending[index]
        del self._pending[index]
        self._in_flight -= 1
        return batch

    # -- the rules --------------------------------------------------------------------------

    def check(self) -> None:
        """Assert the queue's rules (for tests, after every step)."""
        pending = self._pending
        assert 0 <= self._in_flight <= len(pending), (self._in_flight, len(pending))
        assert len(self._refused) == sum(b in self._refused for b in pending), "refused count"
        last = -1
        for index, batch in enumerate(pending):
            assert batch.count > 0
            if index < self._in_flight:
                assert batch.sequence_id >= 0 and batch.frame, f"in flight, not framed: {index}"
            if batch.sequence_id < 0:
                assert self.sender is None, "a sender's batch without its ids"
                continue
            if batch.highest_sequence_id >= self._issued_from:  # not the broker's before this run
                assert batch.sequence_id > last, f"ids fall along the queue at {index}"
                last = batch.highest_sequence_id
            if batch.frame or self.sender is not None:
                assert batch.highest_sequence_id < self._next_id, "an id given twice"
        if self.sender is not None:
            assert all(b.producer_name == self.sender for b in pending)
