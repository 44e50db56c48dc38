"""The journal's segment files: ``journal-<n>.log`` in the state directory.

Appends go to the newest segment (``O_APPEND``, one ``write`` per call, retried
in order after an error); ``--spool-fsync`` says when they are made durable.
Reading back an earlier run's segments never stops the start: a file that is
no regular file or cannot be read is logged and left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from pathlib import Path

from pulsar_bruce.model.vocabulary import FsyncPolicy
from pulsar_bruce.native import pick
from pulsar_bruce.spool.layout import is_journal_name, journal_name, journal_number

log = logging.getLogger(__name__)
retry_log = logging.getLogger(__name__ + ".retry")

#: Unwritten records kept for a retry after a write error, at most; beyond, the journal stops.
MAX_BACKLOG_BYTES = 64 * 1024 * 1024


class SegmentFiles:
    """The journal's files: earlier runs' to read once, this run's to append to and delete."""

    def __init__(self, directory: Path, fsync: FsyncPolicy, segment_bytes: int):
        self.directory = directory
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        #: This run's segments, oldest first; the last one is appended to.
        self.numbers: deque[int] = deque()
        #: Bytes in this run's segments.
        self.size_bytes = 0
        #: Why appending stopped (a write error that could not be retried), or None.
        self.stopped: str | None = None
        self._fd = -1
        self._active_bytes = 0
        self._backlog = b""
        self._unsynced = False
        self._previous: list[Path] = []

    @property
    def active(self) -> int:
        return self.numbers[-1]

    @property
    def full(self) -> bool:
        return self._active_bytes >= self.segment_bytes

    def read_previous(self) -> list[bytes]:
        """An earlier run's segments (oldest first), and this run's first segment after them."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with os.scandir(self.directory) as entries:
            names = sorted(entry.name for entry in entries if is_journal_name(entry.name))
        contents, last = [], -1
        for name in names:
            path = self.directory / name
            try:
                if not path.is_file():
                    raise IsADirectoryError("not a regular file")
                contents.append(path.read_bytes())
            except OSError as exc:
                log.error("journal %s: cannot read %s (%s); left alone", self.directory, name, exc)
                continue
            self._previous.append(path)
            last = max(last, journal_number(name))
        self.start(last + 1)
        return contents

    def delete_previous(self) -> None:
        for path in self._previous:
            self._unlink(path)
        self._previous.clear()

    def start(self, number: int) -> None:
        path = self.directory / journal_name(number)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.numbers.append(number)
        self._active_bytes = 0

    def append(self, data: bytes, consume: tuple[int, int] | None = None) -> bool:
        """Write ``data`` after whatever an earlier failed write left (retried first); True
        when the active segment is now :attr:`full` (time to rotate).

        ``consume``: (socket fd, count): then remove that many peeked datagrams from the
        socket's queue, right after the write (``native/journal_io.c``), whether or not
        the write succeeded (they are in memory; what was not written is retried).
        """
        if self.stopped is not None:
            if consume is not None:
                write_then_consume(-1, b"", *consume)
            return False
        data = self._backlog + data if self._backlog else data
        if consume is not None:
            written, error = write_then_consume(self._fd, data, *consume)
        else:
            written, error = _write_all(self._fd, data)
        self._active_bytes += written
        self.size_bytes += written
        if error:
            exc = OSError(error, os.strerror(error))
            self._backlog = data[written:]
            if len(self._backlog) > MAX_BACKLOG_BYTES:
                self.stopped, self._backlog = str(exc), b""
                log.error(
                    "journal %s: %s; journalling stops until the next start (what memory "
                    "holds is still delivered, but a crash would lose it)",
                    self.directory,
                    exc,
                )
            else:
                retry_log.error("journal %s: %s; retrying with the next write", self.directory, exc)
            return False
        self._backlog = b""
        self._unsynced = True
        if self.fsync is FsyncPolicy.ALWAYS:
            self.durable()
        return self._active_bytes >= self.segment_bytes

    def durable(self) -> None:
        """fsync the active segment, unless ``--spool-fsync never``."""
        if self._fd < 0 or not self._unsynced:
            return
        if self.fsync is not FsyncPolicy.NEVER:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                retry_log.error("journal %s: fsync failed (%s)", self.directory, exc)
                return
        self._unsynced = False

    def rotate(self) -> None:
        self.durable()
        os.close(self._fd)
        self.start(self.active + 1)

    def delete_oldest(self) -> None:
        path = self.directory / journal_name(self.numbers.popleft())
        with contextlib.suppress(OSError):  # gone already: nothing to subtract
            self.size_bytes -= path.stat().st_size
        self._unlink(path)

    def close_and_delete(self) -> None:
        """Clean shutdown: every segment of this run goes."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        while self.numbers:
            self.delete_oldest()
        self.size_bytes = 0

    def _unlink(self, path: Path) -> None:
        try:
            path.unlink()
        except OSError as exc:
            log.error("journal %s: cannot delete %s (%s)", self.directory, path.name, exc)


def _write_all(fd: int, data: bytes) -> tuple[int, int]:
    """Write ``data`` whole; returns (bytes written, errno of the write that failed, or 0)."""
    view = memoryview(data)
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, view[written:])
    except OSError as exc:
        return written, exc.errno or 0
    return written, 0


def _write_then_consume_py(
    journal_fd: int, data: bytes, sock_fd: int, count: int
) -> tuple[int, int]:
    """Twin of ``native/journal_io.c``: write, then take ``count`` datagrams off the queue."""
    written, error = _write_all(journal_fd, data) if data else (0, 0)
    for _ in range(count):
        try:
            os.read(sock_fd, 1)  # one datagram, truncated: its bytes are in the journal
        except (BlockingIOError, InterruptedError):
            break
    return written, error


#: The compiled write-then-consume where the compiled intake runs, else the twin.
write_then_consume = pick("write_then_consume", _write_then_consume_py)
