"""Broker deduplication for the fake broker (``fakebroker.py``), as the Java broker does it.

Modelled on pulsar-broker ``service/persistent/MessageDeduplication.java``
(``isDuplicate`` / ``isDuplicateNormal``, ``recordMessagePersisted`` /
``recordMessagePersistedNormal``, ``resetHighestSequenceIdPushed``,
``getLastPublishedSequenceId``), as ``PersistentTopic.publishMessage`` and
``Producer.MessagePublishContext`` use it.  What carries over:

- The state is per topic and per *producer name*, and the name is the one the
  producer was registered with (``CommandProducer`` / ``ProducerSuccess``: the
  publish context's ``getProducerName()`` is ``Producer.getProducerName()``),
  not the ``producer_name`` a Send's ``MessageMetadata`` carries.
- Two highest sequence ids per name: *pushed* (updated when a Send is accepted
  for writing, before it is persisted) and *persisted* (updated once the entry
  is written: ``PersistentTopic.addComplete`` -> ``recordMessagePersisted``).
  Both record ``max(highest_sequence_id, sequence_id)``.
- A Send is judged by its ``sequence_id`` (the lowest id of a batch) alone:
  at most the pushed id and at most the persisted id -> :attr:`DupStatus.DUP`
  (not stored; ``PersistentTopic.publishMessage`` answers
  ``publishContext.completed(null, -1, -1)``, a receipt for message id -1:-1);
  at most the pushed id but above the persisted id (or none persisted) ->
  :attr:`DupStatus.UNKNOWN` (not stored; ``MessageDupUnknownException``, which
  ``MessagePublishContext.getServerError`` turns into ``SendError(PersistenceError)``
  naming ``max(highest_sequence_id, sequence_id)``); otherwise
  :attr:`DupStatus.NOT_DUP`, and the pushed id moves up.  A batch whose lowest id
  is a duplicate is one as a whole, even if its highest id is new.
- Chunks (Send ``is_chunk``): every chunk has the message's sequence id; a chunk
  that is not the last (``chunk_id != num_chunks_from_msg - 1``) is NOT_DUP
  without looking or recording anything, so it is stored again when resent; only
  the last chunk is checked, pushed and, once written, recorded as persisted.
- ``ProducerSuccess.last_sequence_id`` is the *pushed* id for the registered name,
  -1 when there is none (``Producer.getLastSequenceId`` ->
  ``PersistentTopic.getLastPublishedSequenceId``).
- A failed write leaves the pushed ids where the persisted ones are
  (``PersistentTopic.addFailed`` fences the topic; un-fencing calls
  ``resetHighestSequenceIdPushed``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pulsar_bruce.frame.codec import Frame


class DupStatus(enum.Enum):
    """``MessageDeduplication.MessageDupStatus``."""

    NOT_DUP = "not_dup"
    DUP = "dup"
    UNKNOWN = "unknown"  # pushed but not persisted yet: cannot tell


@dataclass(frozen=True)
class Publish:
    """What deduplication reads of one Send (a ``MessagePublishContext``)."""

    topic: str
    #: The name the producer was registered with, not the metadata's.
    producer_name: str
    sequence_id: int
    #: The Send's ``highest_sequence_id``; -1 when it has none (a non-batched message).
    highest_sequence_id: int = -1
    #: ``(chunk_id, num_chunks_from_msg)`` of a Send with ``is_chunk``; None otherwise.
    chunk: tuple[int, int] | None = None

    @classmethod
    def of(cls, topic: str, producer_name: str, frame: Frame) -> Publish:
        """The publish context of a Send frame from the producer registered as ``producer_name``
        (``Producer.publishMessage``: ``is_chunk`` from the command, the chunk's place from
        its metadata)."""
        send, md = frame.command.send, frame.metadata
        assert md is not None
        highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else -1
        chunk = (md.chunk_id, md.num_chunks_from_msg) if send.is_chunk else None
        return cls(topic, producer_name, send.sequence_id, highest, chunk)

    @property
    def key(self) -> tuple[str, str]:
        return (self.topic, self.producer_name)

    @property
    def top(self) -> int:
        """What is recorded: ``max(highest_sequence_id, sequence_id)``."""
        return max(self.highest_sequence_id, self.sequence_id)

    @property
    def checked(self) -> bool:
        """Whether deduplication looks at it: anything but a chunk before the last."""
        return self.chunk is None or self.chunk[0] == self.chunk[1] - 1


class Deduplication:
    """The pushed and persisted highest sequence ids of every (topic, producer name).

    Call :meth:`check`, then :meth:`push` once the Send is accepted for writing
    (``isDuplicate`` does both at once: :meth:`is_duplicate`), :meth:`persisted`
    once it is written; or :meth:`written` for both, leaving a slow write pending
    until :meth:`persist_pending`.  Not thread-safe: the fake broker calls it under
    its lock.
    """

    def __init__(self) -> None:
        self._pushed: dict[tuple[str, str], int] = {}
        self._persisted: dict[tuple[str, str], int] = {}
        #: Writes pushed and still being persisted, in order.
        self.pending: list[Publish] = []

    def check(self, publish: Publish) -> DupStatus:
        """``isDuplicateNormal`` without its update of the pushed id."""
        if not publish.checked:
            return DupStatus.NOT_DUP
        pushed = self._pushed.get(publish.key)
        if pushed is None or publish.sequence_id > pushed:
            return DupStatus.NOT_DUP
        persisted = self._persisted.get(publish.key)
        if persisted is not None and publish.sequence_id <= persisted:
            return DupStatus.DUP
        return DupStatus.UNKNOWN

    def push(self, publish: Publish) -> None:
        """A NOT_DUP Send goes to be written: its id is pushed (last chunk only)."""
        if publish.checked:
            self._pushed[publish.key] = publish.top

    def is_duplicate(self, publish: Publish) -> DupStatus:
        """``isDuplicate``: :meth:`check`, and :meth:`push` what is not a duplicate."""
        status = self.check(publish)
        if status is DupStatus.NOT_DUP:
            self.push(publish)
        return status

    def persisted(self, publish: Publish) -> None:
        """``recordMessagePersistedNormal``: the entry is written (last chunk only)."""
        if publish.checked:
            self._persisted[publish.key] = publish.top

    def written(self, publish: Publish, slow: bool = False) -> None:
        """A NOT_DUP Send is written: pushed, and persisted at once unless ``slow``."""
        self.push(publish)
        if slow:
            self.pending.append(publish)
        else:
            self.persisted(publish)

    def persist_pending(self) -> None:
        """The slow writes complete (``PersistentTopic.addComplete``), in order."""
        for publish in self.pending:
            self.persisted(publish)
        self.pending.clear()

    def reset_pushed(self) -> None:
        """``resetHighestSequenceIdPushed``: forget what was pushed and never persisted."""
        self._pushed = dict(self._persisted)

    def last_sequence_id(self, topic: str, producer_name: str) -> int:
        """``getLastPublishedSequenceId``: the pushed id, -1 when none."""
        return self._pushed.get((topic, producer_name), -1)

    def highest_persisted(self, topic: str, producer_name: str) -> int | None:
        return self._persisted.get((topic, producer_name))
