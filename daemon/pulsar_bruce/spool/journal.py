"""The write-ahead journal: what the daemon has read survives a crash of its process.

With ``--spool-dir`` (and ``--spool-journal on``, the default) every byte a
socket drain added to a partition's batch is appended to ``journal-<n>.log``
in one ``write`` before the drain ends, and every batch's producer name and
sequence ids before its Send frame is written: the page cache keeps both
through a ``kill -9``, ``--spool-fsync`` says when they reach the disk.
Acked and discarded batches are recorded as settled; a segment is deleted
once it and every older one holds nothing unsettled, and a batch still
unsettled in an old segment is copied forward so one stuck batch cannot pin
the disk.  On start, :func:`~.journal_records.recover` gives back what was
not settled: batches that had been sent keep their producer name and ids, so
a namespace with deduplication drops the copies it had stored.

The intake and the producers never call this per message: the pipeline tells it
what the topic manager touched, once per slab or drain (``pipeline/journalling.py``).  What it
holds of each batch (open or sealed) is its own: a ``JournalEntry``, keyed by
the batch; a producer only says what it queued since (``BatchQueue.take_queued``)
and what it split (``Outgoing.split_from``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from pulsar_bruce.batch.batch_builder import BatchBuilder, batch_entries_of
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.vocabulary import FsyncPolicy
from pulsar_bruce.producer.partition_producer import Outgoing, PartitionProducer
from pulsar_bruce.spool import journal_records as jr
from pulsar_bruce.spool.journal_files import SegmentFiles
from pulsar_bruce.spool.journal_items import JournalEntry, WaitGroup, WaitingTopic

log = logging.getLogger(__name__)


_Holder = BatchBuilder | SealedBatch | WaitGroup


class Journal:
    """Journals batches and waiting messages, settles them, frees and copies forward segments."""

    #: A slab stays on its socket until it is journalled (see ``journal_stage.JournalStage``).
    write_ahead = True

    def __init__(
        self,
        directory: str | Path,
        fsync: str = FsyncPolicy.INTERVAL,
        *,
        segment_bytes: int = 16 * 1024 * 1024,
        max_segments: int = 8,
    ):
        self.directory = Path(directory)
        self.files = SegmentFiles(self.directory, FsyncPolicy(fsync), segment_bytes)
        self.max_segments = max(2, max_segments)
        self._live: dict[int, _Holder] = {}
        #: What is journalled of each open or sealed batch (a wait group holds its own).
        self._entries: dict[BatchBuilder | SealedBatch, JournalEntry] = {}
        #: Parts of a split batch not journalled yet: the item of the batch they replace.
        self._replaces: dict[SealedBatch, int] = {}
        self._segment_items: dict[int, set[int]] = {}
        self._touched: set[PartitionProducer] = set()
        self._waiting: dict[WaitingTopic, WaitGroup] = {}
        self._where: dict[int, tuple[bytes, int]] = {}
        self._out: list[bytes] = []
        self._settled: list[int] = []
        self._next_item = 0

    @property
    def stopped(self) -> str | None:
        """Why the journal stopped (a write error it could not retry), or None."""
        return self.files.stopped

    # -- start and stop -------------------------------------------------------------------

    def open(self) -> jr.Recovered:
        """Read what an earlier run left, and start a new segment after it."""
        recovered = jr.recover(self.files.read_previous())
        self._next_item = recovered.last_item + 1
        self._segment_items[self.files.active] = set()
        if recovered.damaged_records:
            log.error(
                "journal %s: %d damaged records skipped; %d messages in them lost (counted as "
                "spool_damaged)",
                self.directory,
                recovered.damaged_records,
                recovered.lost_messages,
            )
        return recovered

    def drop_previous(self) -> None:
        """The earlier run's segments, once what they held is journalled again (by a sync)."""
        self.sync()
        self.files.durable()
        self.files.delete_previous()

    def close(self) -> None:
        """Clean shutdown: everything is acked, spooled or discarded; the journal goes."""
        self.files.close_and_delete()
        self._segment_items.clear()

    # -- what the pipeline tells (the topic manager's changes) -------------------------------

    def producer_added(self, producer: PartitionProducer, topic: str, partition: int) -> None:
        self._where[producer.producer_id] = (topic.encode(), partition)

    def topic_added(self, topic: WaitingTopic) -> None:
        self._waiting[topic] = WaitGroup()

    def touched(self, producer: PartitionProducer) -> None:
        """``producer``'s open batch got its first message, or a batch was queued."""
        self._touched.add(producer)

    # -- writing ------------------------------------------------------------------------------

    def sync(self, consume: tuple[int, int] | None = None) -> None:
        """After a drain (or a slab): journal every batch touched and every waiting message,
        in one write.  ``consume`` (socket fd, count): the slab was peeked; take it off the
        socket's queue right after the write (see ``SegmentFiles.append``)."""
        if self.files.stopped is None:  # (this runs after every slab: each step tested first)
            touched = self._touched
            if touched:
                for producer in list(touched):
                    self.sync_producer(producer)
                    if not producer.batch.count:
                        touched.discard(producer)
            if self._waiting:
                for topic, group in list(self._waiting.items()):
                    self._sync_waiting(topic, group)
            if self._settled:
                self._record_settled()
        self._write(consume=consume)

    def sync_producer(self, producer: PartitionProducer) -> None:
        """Journal ``producer``'s newly queued batches and its open batch's new bytes."""
        where = self._where.get(producer.producer_id)
        if where is None or self.files.stopped is not None:
            return
        for batch, sealed_from in producer.queue.take_queued():
            self._queued(batch, where, sealed_from)
        builder = producer.batch
        if builder.keys is None:
            self._open_tail(builder, where)
        else:
            for key_batch in builder.keys.values():
                self._open_tail(key_batch, where)

    def sent(self, producer: PartitionProducer, out: Outgoing) -> None:
        """Before ``out``'s batches are written: the ids each goes under (parts of a batch
        split, ``out.split_from``, are journalled first, and replace the batch they came
        from)."""
        if self.stopped is not None:
            return
        if out.split_from:
            self._parts(out.split_from)
        where = self._where.get(producer.producer_id)
        if where is None:  # not one it journals (a sender's)
            return
        replaced = []
        for batch in out.batches:
            entry = self._entries.get(batch)
            if entry is None:
                entry = self._journal_whole(batch, where)
                whole = self._replaces.pop(batch, -1)
                if whole >= 0:
                    replaced.append(whole)
            if entry.numbered != batch.sequence_id:
                name = batch.producer_name or producer.name or ""
                self._out.append(jr.number(entry.item, batch.sequence_id, where[1], name))
                entry.numbered, entry.sent_as = batch.sequence_id, name
                self._pin(entry)
        for item in replaced:
            self._settle(item)
        if replaced:
            self._record_settled()
        self._write()

    def refused(self, producer: PartitionProducer, batch: SealedBatch) -> None:
        """The broker refused ``batch`` while later batches may be stored: a replay takes new
        ids (the record's id -1; flagged ``stored_before`` when an earlier write of it may be
        stored, so the replay counts as a possible duplicate).  Written at once: a crash
        before the next write would replay it under ids the broker takes for duplicates.
        What goes in its place (halves, for the topic's size limit) replaces it."""
        if self.stopped is not None:
            return
        parts = producer.queue.replacing(batch)
        if parts is not None and parts != [batch]:
            self._parts(dict.fromkeys(parts, batch))
        entry = self._entries.get(batch)
        where = self._where.get(producer.producer_id)
        if entry is None or entry.numbered < 0 or where is None:
            return
        stored = batch.may_be_stored
        self._out.append(jr.number(entry.item, -1, where[1], "", stored_before=stored))
        entry.numbered, entry.sent_as, entry.stored_before = -1, "", stored
        self._write()

    def settled(self, batch: SealedBatch) -> None:
        """``batch`` was acked or discarded: recorded at the next write."""
        entry = self._entries.get(batch)
        if entry is not None:
            self._settle(entry.item)
        elif self._replaces:
            whole = self._replaces.pop(batch, -1)
            if whole >= 0:
                self._settle(whole)

    def tick(self) -> None:
        """About once a second: record what settled meanwhile; fsync per ``interval``."""
        if self.stopped is not None:
            return
        self._record_settled()
        self._write()
        if self.files.fsync is FsyncPolicy.INTERVAL:
            self.files.durable()
        self._free_old_segments()

    # -- items --------------------------------------------------------------------------------

    def _new_entry(self, holder: _Holder, topic: bytes, partition: int) -> JournalEntry:
        entry = JournalEntry(self._next_item, topic, partition)
        self._next_item += 1
        self._live[entry.item] = holder
        if not isinstance(holder, WaitGroup):
            self._entries[holder] = entry
        return entry

    def _parts(self, split_from: Mapping[SealedBatch, SealedBatch]) -> None:
        """Parts of split batches (in the order they were cut): each replaces the journalled
        batch its whole is, or replaces."""
        replaces = self._replaces
        for part, whole in split_from.items():
            entry = self._entries.get(whole)
            item = entry.item if entry is not None else replaces.get(whole, -1)
            if item >= 0:
                replaces[part] = item
        for whole in split_from.values():  # a part cut again: its parts stand for it now
            replaces.pop(whole, None)

    def _open_tail(self, builder: BatchBuilder, where: tuple[bytes, int]) -> None:
        entry = self._entries.get(builder)
        journalled = 0 if entry is None else entry.journalled_bytes
        if builder.size <= journalled:
            return
        if entry is None:
            entry = self._new_entry(builder, *where)
        self._piece(entry, builder.tail(journalled), builder.count)

    def _queued(
        self, batch: SealedBatch, where: tuple[bytes, int], sealed_from: BatchBuilder | None
    ) -> None:
        entries = self._entries
        entry = entries.get(batch)
        if entry is None and sealed_from is not None:
            entry = entries.pop(sealed_from, None)  # what its open batch had journalled
            if entry is not None:
                entries[batch] = entry
                self._live[entry.item] = batch
        if entry is None:
            entry = self._journal_whole(batch, where)
        else:
            if entry.journalled_bytes < len(batch.payload):
                self._piece(entry, batch.payload[entry.journalled_bytes :], batch.count)
        if batch.sequence_id >= 0 and batch.producer_name and entry.numbered < 0:
            self._out.append(
                jr.number(entry.item, batch.sequence_id, entry.partition, batch.producer_name)
            )  # ids kept from the spool or an earlier journal
            entry.numbered, entry.sent_as = batch.sequence_id, batch.producer_name
        elif batch.sequence_id < 0 and batch.stored_before and not entry.stored_before:
            # no ids, but an earlier copy may be stored (see ``refused``)
            self._out.append(jr.number(entry.item, -1, entry.partition, "", stored_before=True))
            entry.stored_before = True

    def _journal_whole(self, batch: SealedBatch, where: tuple[bytes, int]) -> JournalEntry:
        entry = self._new_entry(batch, *where)
        self._piece(entry, batch.payload or batch_entries_of(batch), batch.count)
        return entry

    def _piece(self, entry: JournalEntry, data: bytes | bytearray, total_count: int) -> None:
        offset = entry.journalled_bytes
        count = total_count - entry.journalled_count
        self._out.append(jr.piece(entry.item, offset, count, entry.topic, entry.partition, data))
        entry.journalled_bytes = offset + len(data)
        entry.journalled_count = total_count
        segments = entry.segments
        if not segments or segments[-1] != self.files.numbers[-1]:
            self._pin(entry)

    def _pin(self, entry: JournalEntry) -> None:
        active = self.files.active
        if not entry.segments or entry.segments[-1] != active:
            entry.segments.append(active)
            self._segment_items[active].add(entry.item)

    def _settle(self, item: int) -> None:
        if self._release(item):
            self._settled.append(item)
            if self._replaces:  # parts of it that never went (given up with it) stand for none
                self._replaces = {p: i for p, i in self._replaces.items() if i != item}

    def _record_settled(self) -> None:
        if self._settled:
            self._out.append(jr.settled(self._settled))
            self._settled = []

    def _release(self, item: int) -> bool:
        """``item`` no longer pins its segments; False if it was not live."""
        holder = self._live.pop(item, None)
        if holder is None:
            return False
        entry = holder.journal if isinstance(holder, WaitGroup) else self._entries.pop(holder, None)
        if entry is None:
            return False
        for segment in entry.segments:
            items = self._segment_items.get(segment)
            if items is not None:
                items.discard(item)
        return True

    def _sync_waiting(self, topic: WaitingTopic, group: WaitGroup) -> None:
        unrouted = topic.unrouted
        emptied = len(unrouted) < group.count or (
            group.count and unrouted[group.count - 1] is not group.last
        )
        if group.journal is not None and (topic.producers or emptied):
            self._out.append(jr.wait_done(group.journal.item))  # routed or discarded
            self._release(group.journal.item)
            group.reset()
        for partition, batch in topic.unrouted_batches:
            if batch not in self._entries:
                self._queued(batch, (topic.name.encode(), partition), None)
        if topic.producers:
            del self._waiting[topic]
            return
        if len(unrouted) > group.count:
            if group.journal is None:
                group.journal = self._new_entry(group, topic.name.encode(), 0)
            item, name = group.journal.item, group.journal.topic
            new = unrouted[group.count :]
            self._out.extend(jr.wait(item, name, waiting.data) for waiting in new)
            group.count, group.last = len(unrouted), unrouted[-1]
            self._pin(group.journal)

    # -- segments -------------------------------------------------------------------------

    def _write(self, *, copying: bool = False, consume: tuple[int, int] | None = None) -> None:
        """Append what is buffered in one write; rotate, then copy forward and free segments."""
        out = self._out
        if not out:
            if consume is not None and consume[1]:
                self.files.append(b"", consume)
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        files = self.files
        if files.append(data, consume) and not copying and files.stopped is None:
            files.rotate()
            self._segment_items[files.active] = set()
            if len(files.numbers) > self.max_segments:
                self._copy_forward(files.numbers[0])
                self._write(copying=True)
            self._free_old_segments()

    def _free_old_segments(self) -> None:
        """Delete the oldest segments while they (and so all before them) hold nothing live."""
        files = self.files
        while len(files.numbers) > 1 and not self._segment_items[files.numbers[0]]:
            del self._segment_items[files.numbers[0]]
            files.delete_oldest()

    def _copy_forward(self, oldest: int) -> None:
        """Write what is still unsettled in segment ``oldest`` again, so it can be deleted."""
        for item in list(self._segment_items[oldest]):
            holder = self._live[item]
            entry = holder.journal if isinstance(holder, WaitGroup) else self._entries[holder]
            assert entry is not None
            if isinstance(holder, WaitGroup):
                self._out.append(jr.wait_done(item))
                self._release(item)
                holder.reset()  # journalled afresh by the next sync
                continue
            entry.segments.remove(oldest)
            self._segment_items[oldest].discard(item)
            if isinstance(holder, BatchBuilder):
                data, count = holder.tail(0), holder.count
            else:
                data, count = holder.payload or batch_entries_of(holder), holder.count
            entry.journalled_bytes = entry.journalled_count = 0
            self._piece(entry, data, count)
            if entry.numbered >= 0:
                self._out.append(jr.number(item, entry.numbered, entry.partition, entry.sent_as))
            elif entry.stored_before:
                self._out.append(jr.number(item, -1, entry.partition, "", stored_before=True))
        for topic, group in list(self._waiting.items()):
            if group.journal is None and topic.unrouted:
                self._sync_waiting(topic, group)
