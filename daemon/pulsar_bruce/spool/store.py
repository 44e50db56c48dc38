"""Spool segment files: appended at the tail, read back from the head, in order.

The directory holds ``seg-<n>.spool`` files (rotated at ``segment_bytes``) and
a ``cursor`` file with one ``<segment> <offset>`` line per partly read segment
(one line is the format of earlier versions).  A fully read segment is deleted.
At shutdown, batches still in memory are written to a *front* segment that
sorts before the head (``seg-<n>.0front.spool``), so they are replayed first,
as they are older than anything already spooled.  The head may be partly read
by then, and the front may be read in parts after the next start: so each
segment keeps its own offset, and neither read loses the other's place.

Durability follows ``fsync``: ``always`` (every append), ``interval`` (the
edge calls :meth:`SpoolStore.sync` about once a second) or ``never``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO

from pulsar_bruce.model.vocabulary import FsyncPolicy
from pulsar_bruce.spool import records

_CURSOR = "cursor"
_SUFFIX = ".spool"


class SpoolStore:
    """Bounded, ordered, on-disk overflow queue of spool records."""

    def __init__(
        self,
        directory: str | Path,
        max_bytes: int,
        fsync: str = FsyncPolicy.INTERVAL,
        segment_bytes: int = 16 * 1024 * 1024,
    ):
        if fsync not in tuple(FsyncPolicy):
            raise ValueError(f"fsync must be one of {', '.join(FsyncPolicy)}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.fsync = FsyncPolicy(fsync)
        self.segment_bytes = segment_bytes
        self.size_bytes = 0
        self.corrupt_records = 0
        self._tail: BinaryIO | None = None
        self._tail_name = ""
        self._tail_size = 0
        self._dirty = False
        #: Offset reached in each partly read segment (absent: not read yet).
        self._offsets: dict[str, int] = {}
        self._saved_cursor = ""
        self._next_number = 1

    # -- opening ------------------------------------------------------------------------

    def open(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        segments = self._segments()
        sizes = {name: (self.directory / name).stat().st_size for name in segments}
        cursor = self.directory / _CURSOR
        text = cursor.read_text() if cursor.exists() else ""
        named: list[str] = []
        for line in text.splitlines():
            name, _, offset = line.partition(" ")
            named.append(name)
            if name in sizes and offset.strip().isdigit() and int(offset) > 0:
                self._offsets[name] = min(int(offset), sizes[name])
        self.size_bytes = sum(sizes.values()) - sum(self._offsets.values())
        # A name the cursor file still mentions (a crash between deleting a read segment
        # and saving the cursor) is never given to a new segment.
        numbers = [_number(name) for name in segments + named if name.startswith("seg-")]
        self._next_number = max(numbers, default=0) + 1
        self._saved_cursor = text
        if self._cursor_text() != text:  # stale lines dropped: for good, before any new segment
            self._save_cursor(durable=self.fsync is not FsyncPolicy.NEVER)

    def segment_names(self) -> list[str]:
        """The segment files there are now, oldest first."""
        return self._segments()

    def _segments(self) -> list[str]:
        return sorted(p.name for p in self.directory.glob(f"seg-*{_SUFFIX}"))

    # -- writing ------------------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        return self.size_bytes + size <= self.max_bytes

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    def append(self, record: bytes) -> None:
        """Append one encoded record at the tail (the caller checked :meth:`has_room`)."""
        if self._tail is None or self._tail_size >= self.segment_bytes:
            self._open_new_tail()
        assert self._tail is not None
        self._tail.write(record)
        self._tail_size += len(record)
        self.size_bytes += len(record)
        self._dirty = True
        if self.fsync is FsyncPolicy.ALWAYS:
            self.sync()

    def _open_new_tail(self) -> None:
        self._close_tail()
        self._tail_name = f"seg-{self._next_number:012d}{_SUFFIX}"
        self._next_number += 1
        self._tail = (self.directory / self._tail_name).open("ab")
        self._tail_size = 0

    def _close_tail(self) -> None:
        if self._tail is not None:
            self.sync()
            self._tail.close()
            self._tail = None

    def sync(self) -> None:
        """Make what was appended durable (per the fsync policy)."""
        if self._tail is None or not self._dirty:
            return
        self._tail.flush()
        if self.fsync is not FsyncPolicy.NEVER:
            os.fsync(self._tail.fileno())
        self._dirty = False

    def write_front(self, front: list[bytes]) -> None:
        """Shutdown: records older than everything spooled so far, to be replayed first."""
        if not front:
            return
        segments = self._segments()
        head = segments[0] if segments else f"seg-{self._next_number:012d}{_SUFFIX}"
        name = head.removesuffix(_SUFFIX) + ".0front" + _SUFFIX
        path = self.directory / name
        # The head's offset is on disk before the front is, and no stale line can name it.
        self._save_cursor(durable=self.fsync is not FsyncPolicy.NEVER)
        start = path.stat().st_size if path.exists() else -1
        written = 0
        try:
            with path.open("ab") as handle:
                for record in front:
                    handle.write(record)
                    written += len(record)
                handle.flush()
                if self.fsync is not FsyncPolicy.NEVER:
                    os.fsync(handle.fileno())
        except OSError:
            # The caller counts these messages as discarded: none of them may be replayed.
            with contextlib.suppress(OSError):
                if start < 0:
                    path.unlink()
                else:
                    os.truncate(path, start)
            raise
        self.size_bytes += written

    # -- reading ------------------------------------------------------------------------

    def read(self, max_bytes: int) -> list[tuple[int, bytes, str]]:
        """Up to about ``max_bytes`` of records from the head, in order, as (kind, body,
        segment name); advances the cursor.  At least one whole record, however large."""
        if self._tail is not None:
            self._tail.flush()
        out: list[tuple[int, bytes, str]] = []
        budget = max_bytes
        for name in self._segments():
            if budget <= 0:
                break
            path = self.directory / name
            offset = self._offsets.get(name, 0)
            is_tail = name == self._tail_name
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read(max(budget, records.HEADER_SIZE))
                whole = records.first_record_size(data)
                if whole > len(data):  # the budget is smaller than the next record
                    data += handle.read(whole - len(data))
                at_end = handle.tell() >= os.fstat(handle.fileno()).st_size
            result = records.scan(data, final=at_end and not is_tail)
            self.corrupt_records += result.corrupt
            out.extend((kind, body, name) for kind, body in result.records)
            offset += result.consumed
            self.size_bytes = max(self.size_bytes - result.consumed, 0)
            budget -= result.consumed
            finished = at_end and result.consumed == len(data)
            if finished and not is_tail:
                path.unlink()
                self._offsets.pop(name, None)
                continue
            if finished and is_tail:
                self._reset_tail()
                break
            self._offsets[name] = offset
            break  # this segment is not done: the next one must wait
        self._save_cursor()
        return out

    def _reset_tail(self) -> None:
        """Everything written has been read: start the next append in a fresh segment."""
        if self._tail is not None:
            self._tail.close()
            self._tail = None
            with contextlib.suppress(OSError):
                (self.directory / self._tail_name).unlink()
        self._tail_name = ""
        self._offsets.clear()  # the tail is the last segment: all before it are gone
        self._save_cursor()
        self.size_bytes = 0

    def _save_cursor(self, durable: bool = False) -> None:
        """Replace the cursor file (atomically) when an offset moved; ``durable`` also
        fsyncs it and the directory, for the moments a stale cursor could cost data."""
        text = self._cursor_text()
        if text == self._saved_cursor and not durable:
            return
        temporary = self.directory / (_CURSOR + ".tmp")
        with temporary.open("w") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        temporary.replace(self.directory / _CURSOR)
        if durable:
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        self._saved_cursor = text

    def _cursor_text(self) -> str:
        # One line, no newline, when one segment is partly read: what earlier versions read.
        return "\n".join(f"{name} {offset}" for name, offset in sorted(self._offsets.items()))

    def close(self) -> None:
        self._close_tail()


def _number(name: str) -> int:
    digits = name.removeprefix("seg-").split(".", 1)[0]
    return int(digits) if digits.isdigit() else 0
