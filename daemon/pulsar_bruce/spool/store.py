"""Spool segment files: appended at the tail, read back from the head, in order.

The directory holds ``seg-<n>.spool`` files (rotated at ``segment_bytes``) and
a ``cursor`` file with one ``<segment> <offset>`` line per partly read segment
(one line is the format of earlier versions).  A fully read segment is deleted.
At shutdown, batches still in memory are written to a *front* segment that
sorts before the head (``seg-<n>.0front.spool``), so they are replayed first,
as they are older than anything already spooled.  The head may be partly read
by then, and the front may be read in parts after the next start: so each
segment keeps its own offset, and neither read loses the other's place.

Damage (a file cut short, flipped bits, a segment gone or renamed, a cursor past
a segment's end) never stops the replay and is never silent: every intact
record is kept, each damaged segment is logged in one line, and the messages
known to be lost are added to :attr:`SpoolStore.lost_this_run` or
:attr:`SpoolStore.lost_previous_run` for the caller to count.  This run's
segments are counted exactly (the store knows how many messages it wrote to
each); an earlier run's by the ``COUNT`` marks written about every
``mark_bytes`` and when a segment is closed (exact where an intact mark follows
the damage, see ``records.py``), else as far as the damaged records' headers tell.
Anything else in the directory is logged once and left alone.  A read segment
is deleted only in :meth:`SpoolStore.commit`, once its records are admitted.

Durability follows ``fsync``: ``always`` (every append), ``interval`` (the
edge calls :meth:`SpoolStore.sync` about once a second) or ``never``.  Reading
(:meth:`~.store_reading.StoreReading.read`) is ``store_reading.py``'s.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path

from pulsar_bruce.model.vocabulary import FsyncPolicy
from pulsar_bruce.spool import layout, records
from pulsar_bruce.spool.layout import (
    CURSOR,
    OWN_FILES,
    SEGMENT_SUFFIX,
    append_whole,
    cursor_text,
    is_journal_name,
    is_segment_name,
    place_cursor,
    write_cursor,
)
from pulsar_bruce.spool.store_reading import StoreReading

log = logging.getLogger(__name__)
#: Errors retried with the next read (rate-limited by the daemon's log handler).
retry_log = logging.getLogger(__name__ + ".retry")

class SpoolStore(StoreReading):
    """Bounded, ordered, on-disk overflow queue of spool records."""

    def __init__(
        self,
        directory: str | Path,
        max_bytes: int,
        fsync: str = FsyncPolicy.INTERVAL,
        segment_bytes: int = 16 * 1024 * 1024,
        mark_bytes: int = 64 * 1024,
    ):
        if fsync not in tuple(FsyncPolicy):
            raise ValueError(f"fsync must be one of {', '.join(FsyncPolicy)}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.fsync = FsyncPolicy(fsync)
        self.segment_bytes = segment_bytes
        #: A ``COUNT`` mark follows the write that takes the tail this far past the last one
        #: (0: no marks at all, for tests of the read offsets' arithmetic).
        self.mark_bytes = mark_bytes
        self.size_bytes = 0
        self.corrupt_records = 0
        #: Messages this run spooled (``Ledger.spill``) found lost, not yet taken by the caller.
        self.lost_this_run = 0
        #: Messages of earlier runs found lost (their count known from the records' headers).
        self.lost_previous_run = 0
        #: Segments whose read offset was lost: replayed from their start, maybe twice.
        self.suspect: set[str] = set()
        self._tail: io.FileIO | None = None
        self._tail_name = ""
        self._tail_size = 0
        #: Messages appended to the tail, and its size at its last mark.
        self._tail_messages = 0
        self._marked_at = 0
        self._dirty = False
        #: Offset reached in each partly read segment (absent: not read yet).
        self._offsets: dict[str, int] = {}
        self._saved_cursor = ""
        self._next_number = 1
        #: Messages appended to each of this run's segments and not yet read back.
        self._unread: dict[str, int] = {}
        #: Fully read segments, deleted by :meth:`commit` (their records are admitted then).
        self._finished: list[str] = []
        self._unknown_logged: set[str] = set()
        #: Where reading a segment must stop (a failed write there could not be undone).
        self._limits: dict[str, int] = {}
        #: Per segment being read: [corrupt records, messages known lost], logged at its end.
        self._damage: dict[str, list[int]] = {}
        #: Per segment being read: where it stands with its marks.
        self._tallies: dict[str, records.Tally] = {}

    # -- opening ------------------------------------------------------------------------

    def open(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        segments = self._segments()
        sizes = {name: (self.directory / name).stat().st_size for name in segments}
        cursor = self.directory / CURSOR
        try:
            text = cursor.read_text() if cursor.exists() else ""
        except (OSError, UnicodeDecodeError) as exc:
            log.error("spool %s: cannot read the cursor (%s); replaying from the start, "
                      "possibly twice", self.directory, exc)  # fmt: skip
            text = ""
            self.suspect.update(segments)
        places = place_cursor(text, sizes)
        for name in places.gone:
            log.warning("spool %s: the cursor names %s, which is gone (read and deleted "
                        "before a crash, or removed or renamed: then what it held is "
                        "lost)", self.directory, name)  # fmt: skip
        for name, offset in places.past_end.items():
            log.error("spool %s: segment %s is shorter (%d bytes) than its read offset "
                      "%d: replaying it from its start (possible duplicates)",
                      self.directory, name, sizes[name], offset)  # fmt: skip
            self.suspect.add(name)
        self._offsets = places.offsets
        self.size_bytes = sum(sizes.values()) - sum(self._offsets.values())
        # A name the cursor file still mentions (a crash between deleting a read segment
        # and saving the cursor) is never given to a new segment.
        numbers = [layout.number(n) for n in segments + places.named if n.startswith("seg-")]
        self._next_number = max(numbers, default=0) + 1
        self._saved_cursor = text
        if cursor_text(self._offsets) != text:  # stale lines dropped, before any new segment
            self._save_cursor(durable=self.fsync is not FsyncPolicy.NEVER)

    def segment_names(self) -> list[str]:
        """The segment files there are now, oldest first."""
        return self._segments()

    def _segments(self) -> list[str]:
        """The regular ``seg-*.spool`` files; anything else is logged once, left alone."""
        names = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                name = entry.name
                if is_segment_name(name) and entry.is_file():
                    names.append(name)
                elif is_journal_name(name):
                    continue  # the write-ahead journal's (journal.py)
                elif name not in OWN_FILES and name not in self._unknown_logged:
                    self._unknown_logged.add(name)
                    log.warning("spool %s: %s is not a spool segment; left alone",
                                self.directory, name)  # fmt: skip
        return sorted(names)

    # -- writing ------------------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        return self.size_bytes + size <= self.max_bytes

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    def append(self, record: bytes, messages: int = 1) -> None:
        """Append encoded records (``messages`` of them) at the tail; the caller checked
        :meth:`has_room`.  All or nothing: after an OSError none of them is on disk."""
        if self._tail is None or self._tail_size >= self.segment_bytes:
            self._open_new_tail()
        assert self._tail is not None
        fd = self._tail.fileno()
        start = self._tail_size
        total = self._tail_messages + messages
        marked = 0 < self.mark_bytes <= start + len(record) - self._marked_at
        if marked:
            record += records.count_mark(total)
        try:
            view = memoryview(record)
            while view:
                view = view[os.write(fd, view) :]
            if self.fsync is FsyncPolicy.ALWAYS:
                os.fsync(fd)
        except OSError:
            # The caller discards these messages: no part of them may be replayed.
            try:
                os.ftruncate(fd, start)
            except OSError as exc:
                log.error("spool %s: cannot undo a failed write (%s); starting a new segment",
                          self.directory, exc)  # fmt: skip
                self._abandon_tail(start)
            raise
        self._tail_size += len(record)
        self.size_bytes += len(record)
        self._tail_messages = total
        if marked:
            self._marked_at = self._tail_size
        self._unread[self._tail_name] = self._unread.get(self._tail_name, 0) + messages
        self._dirty = self.fsync is not FsyncPolicy.ALWAYS

    def _open_new_tail(self) -> None:
        self._mark_tail()
        self._close_tail()
        self._tail_name = f"seg-{self._next_number:012d}{SEGMENT_SUFFIX}"
        self._next_number += 1
        self._tail = (self.directory / self._tail_name).open("ab", buffering=0)
        self._tail_size = self._tail_messages = self._marked_at = 0

    def _mark_tail(self) -> None:
        """The tail is closed for good: a last mark after its last records (if it lacks
        one), so damage anywhere in it is counted exactly.  Best effort."""
        if self._tail is None or self._tail_size == self._marked_at or self.mark_bytes <= 0:
            return
        mark = records.count_mark(self._tail_messages)
        try:
            if os.write(self._tail.fileno(), mark) < len(mark):
                os.ftruncate(self._tail.fileno(), self._tail_size)  # no torn mark
                return
        except OSError:
            return
        self._tail_size += len(mark)
        self.size_bytes += len(mark)
        self._marked_at = self._tail_size
        self._dirty = True

    def _abandon_tail(self, end: int) -> None:
        """A write failed and could not be undone: what follows ``end`` is never read."""
        self._limits[self._tail_name] = end
        with contextlib.suppress(OSError):
            self._close_tail()
        self._tail = None

    def _close_tail(self) -> None:
        if self._tail is not None:
            self.sync()
            self._tail.close()
            self._tail = None

    def sync(self) -> None:
        """Make what was appended durable (per the fsync policy)."""
        if self._tail is None or not self._dirty:
            return
        if self.fsync is not FsyncPolicy.NEVER:
            os.fsync(self._tail.fileno())
        self._dirty = False

    def write_front(self, front: list[bytes]) -> None:
        """Shutdown: records older than everything spooled so far, to be replayed first."""
        if not front:
            return
        segments = self._segments()
        head = segments[0] if segments else f"seg-{self._next_number:012d}{SEGMENT_SUFFIX}"
        name = head.removesuffix(SEGMENT_SUFFIX) + ".0front" + SEGMENT_SUFFIX
        path = self.directory / name
        # The head's offset is on disk before the front is, and no stale line can name it.
        self._save_cursor(durable=self.fsync is not FsyncPolicy.NEVER)
        if self.mark_bytes > 0:  # the front's own count: it is read from its start
            head_size = records.HEADER_SIZE
            messages = sum(records.message_count(r[head_size], r[head_size + 1 :]) for r in front)
            front = [*front, records.count_mark(messages)]
        # All or nothing: the caller counts these messages as discarded after an OSError.
        self.size_bytes += append_whole(path, front, durable=self.fsync is not FsyncPolicy.NEVER)

    # -- after reading ------------------------------------------------------------------

    def take_losses(self) -> tuple[int, int]:
        """Messages found lost since the last call: (this run's, earlier runs')."""
        losses = (self.lost_this_run, self.lost_previous_run)
        self.lost_this_run = self.lost_previous_run = 0
        return losses

    def commit(self) -> None:
        """The records :meth:`read` returned are admitted: delete the segments they
        emptied and save the cursor.  After an OSError deleting, the next call tries
        again.  A cursor that cannot be saved (a full disk) is logged and saved by a later
        call: the replay goes on meanwhile (a crash then replays some records twice)."""
        while self._finished:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / self._finished[0]).unlink()
            self._finished.pop(0)
        try:
            self._save_cursor()
        except OSError as exc:
            retry_log.error("spool %s: cannot save the cursor (%s); saved with a later read",
                            self.directory, exc)  # fmt: skip

    def _save_cursor(self, durable: bool = False) -> None:
        """Replace the cursor file when an offset moved; ``durable``: also fsync it (and
        the directory), for the moments a stale cursor could cost data."""
        text = cursor_text(self._offsets)
        if text != self._saved_cursor or durable:
            write_cursor(self.directory, text, durable)
            self._saved_cursor = text

    def close(self) -> None:
        self._mark_tail()
        self._close_tail()
