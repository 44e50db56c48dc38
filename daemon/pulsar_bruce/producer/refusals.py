"""Batches the broker refused while it went on storing the ones written after them. Sans-IO.

The broker refuses some Sends before deduplication records them (a
``ChecksumError``, the topic's size limit, ``MessageDupUnknownException``, a
write failed while the topic is fenced) and goes on storing the batches written
after them (a topic is un-fenced once its pending writes are done).  It would
then take the refused batch's lower ids for duplicates of those: resent under
them, it is answered -1:-1 and never stored.  The Java client resends it so
(``ProducerImpl.recoverChecksumError``, ``resendMessages``) and loses it.

So a refused batch waits in its place (:meth:`Refusals.refuse`) until every
batch written after it is answered: the broker answers a producer's Sends in
order, and ``CloseProducer`` only once each has its answer.  Then
(:meth:`Refusals.release`) it goes again under its ids (or in halves, for the
size limit) when no id above it may be stored; otherwise our own name's batch
takes new ids (a possible duplicate only where an earlier write of it may be
stored), and a sender's, whose ids are its own, goes back to the sender.  A
batch lost unanswered with its connection may be stored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import unframe
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.producer.sequence_ids import take_ids_back


class Refusals:
    """The refusal rules of :class:`~.batch_queue.BatchQueue` (its base), which keeps the
    refused batches and what goes in their place (nothing of it is kept on a batch)."""

    _pending: deque[SealedBatch]
    _in_flight: int
    sender: str | None

    def __init__(self) -> None:
        #: Refused batches waiting in the queue, and the highest id that may be stored among
        #: the batches answered (or lost unanswered) since the first of them was refused.
        self._refused: dict[SealedBatch, list[SealedBatch]] = {}
        self._stored_top = -1
        #: What :meth:`release` decided, for the producer to report at its next write: a
        #: sender's refused batches with the reason, and batches renumbered that an earlier
        #: write may have stored.
        self.failed_back: list[tuple[SealedBatch, str]] = []
        self.possibly_stored: list[SealedBatch] = []
        #: Refused batches whose ids the journal keeps for a replay (:meth:`keep_journalled`).
        self._journalled_ids: set[SealedBatch] = set()

    def in_flight_batch(self, sequence_id: int) -> SealedBatch | None:
        raise NotImplementedError

    @property
    def refused(self) -> int:
        return len(self._refused)

    def replacing(self, batch: SealedBatch) -> list[SealedBatch] | None:
        """What goes in the place of the refused ``batch`` (None: it is not refused)."""
        return self._refused.get(batch)

    @property
    def releasable(self) -> bool:
        """Every batch in flight is a refused one, each chunk of it answered (the rest are
        answered: receipts count only while a batch is unanswered)."""
        pending = self._pending
        return all(
            pending[i] in self._refused and pending[i].receipts >= pending[i].frames
            for i in range(self._in_flight)
        )

    def refuse(self, batch: SealedBatch, replacement: list[SealedBatch]) -> None:
        """The broker refused the in-flight ``batch`` before deduplication saw it: it waits in
        place until the batches written after it are answered (:meth:`release`), then
        ``replacement`` (itself, or its halves, each message under its id) goes in its place;
        none for a message in chunks over the topic's size limit, given up once its other
        chunks are answered (the last one stored records its id: :meth:`answered_refused`)."""
        assert batch not in self._refused and self.in_flight_batch(batch.sequence_id) is batch
        if replacement != [batch]:
            self._keep_ids(batch, replacement)
        self._refused[batch] = replacement
        batch.receipts += 1  # the refusal answers one of its frames (of a message in chunks)

    def keep_journalled(self, batch: SealedBatch) -> None:
        """The refused ``batch`` rides out an earlier write of it still being persisted: the
        journal keeps its ids for a replay (the broker may yet take that write), until
        :meth:`overtaken` returns it."""
        self._journalled_ids.add(batch)

    def overtaken(self) -> list[SealedBatch]:
        """Batches of :meth:`keep_journalled` an id above which may be stored now: the broker
        would take them for duplicates of it (-1:-1), so :meth:`release` renumbers them, and
        a replay after a crash must not offer their ids either."""
        if not self._journalled_ids:
            return []
        top, refused = self._stored_top, self._refused
        gone = [b for b in self._journalled_ids if b not in refused or b.sequence_id <= top]
        self._journalled_ids.difference_update(gone)
        return [b for b in gone if b in refused]

    def release(self) -> None:
        """Every batch written after the refused ones is answered (or lost unanswered): a
        refused batch keeps its ids when no id above it may be stored; otherwise our own
        name's go under new ids at the end of the queue, and a sender's go back to it."""
        pending, top = self._pending, self._stored_top
        index, renumbered = 0, []
        while index < len(pending) and self._refused:
            batch = pending[index]
            parts = self._refused.pop(batch, None)
            if parts is None:
                index += 1
                continue
            del pending[index]
            if not parts:  # a message in chunks over the topic's limit: its chunks answered
                self.failed_back.append((batch, reasons.given_up(reasons.TOO_LARGE, batch)))
            elif batch.sequence_id > top:
                for part in reversed(parts):
                    pending.insert(index, part)
                index += len(parts)
            elif self.sender is None:
                for part in parts:
                    if part.may_be_stored:
                        self.possibly_stored.append(part)
                    unframe(part)
                    take_ids_back(part)
                renumbered += parts
            else:
                why = reasons.BROKER_REJECTED if parts == [batch] else reasons.TOO_LARGE
                self.failed_back.append((batch, reasons.given_up(why, batch)))
        at = len(pending)  # after the last numbered batch: before the new ones, in order
        while at > 0 and pending[at - 1].sequence_id < 0:
            at -= 1
        for part in reversed(renumbered):
            pending.insert(at, part)
        self._in_flight, self._stored_top = 0, -1
        self._journalled_ids.clear()

    @staticmethod
    def _keep_ids(whole: SealedBatch, parts: Iterable[SealedBatch]) -> None:
        """``parts`` of ``whole``, in order: each message keeps its id (none if it has none)."""
        if whole.sequence_id < 0:
            return
        next_id = whole.sequence_id
        for part in parts:
            part.sequence_id, part.producer_name = next_id, whole.producer_name
            next_id += part.count

    def _acked(self, index: int) -> SealedBatch:
        """A receipt took ``pending[index]``: while a refused batch waits, its ids may be stored
        (a receipt for -1:-1 says the broker has them too)."""
        batch = self._remove_in_flight(index)
        if self._refused:
            self._stored_top = max(self._stored_top, batch.highest_sequence_id)
        return batch

    def answered_refused(self, sequence_id: int, stored: bool) -> bool:
        """An answer for another chunk of a refused message cut in chunks (True: it was one).
        A receipt (``stored``) means that chunk was stored, the last one maybe, which
        deduplication records: the message's id may be taken."""
        pending = self._pending
        for index in range(self._in_flight):
            batch = pending[index]
            if batch in self._refused and batch.sequence_id <= sequence_id <= (
                batch.highest_sequence_id
            ):
                batch.receipts += 1
                if stored:
                    self._stored_top = max(self._stored_top, batch.highest_sequence_id)
                else:
                    batch.refused()
                return True
        return False

    def _unanswered_may_be_stored(self) -> None:
        pending = self._pending
        for index in range(self._in_flight):
            batch = pending[index]
            if batch not in self._refused or batch.receipts < batch.frames:
                self._stored_top = max(self._stored_top, batch.highest_sequence_id)

    def _remove_in_flight(self, index: int) -> SealedBatch:
        raise NotImplementedError
