"""A stopped daemon's spool directory: list it, check it, empty it (the spool subcommand).

:func:`inspect_spool` reads the directory the way the daemon's replay does (the
store's cursor rules, :func:`records.scan` over each segment from its read
offset) and returns what it found; it never writes.  :func:`empty_spool`
deletes the files the store names (segments and the cursor), never anything
else.  :func:`daemon_using` tells whether a running pulsar-bruce has the
directory open (the store holds no lock file, so ``/proc`` is asked).
The command line only prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pulsar_bruce.spool import records
from pulsar_bruce.spool.journal_records import Recovered, recover
from pulsar_bruce.spool.layout import (
    CURSOR,
    OWN_FILES,
    is_journal_name,
    is_segment_name,
    place_cursor,
)

#: Bytes read at a time (a larger record is read whole, as the replay does).
CHUNK = 1024 * 1024


class NotASpoolDirectory(Exception):
    """The path does not exist or is not a directory (a usage error)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment file, as the replay would read it."""

    name: str
    size: int
    #: Where the replay starts (the cursor's offset; 0 also when that offset is past the end).
    offset: int = 0
    #: Intact records and the messages they hold, from ``offset`` on.
    records: int = 0
    messages: int = 0
    corrupt: int = 0
    #: Messages in corrupt records, as far as their headers tell.
    lost_messages: int = 0
    #: The cursor's offset when it is past the end (the replay reads it from its start).
    cursor_past_end: int | None = None
    #: Why it could not be read (empty: it could).
    error: str = ""

    @property
    def damaged(self) -> bool:
        return bool(
            self.corrupt or self.cursor_past_end is not None or self.size == 0 or self.error
        )

    def problems(self) -> list[str]:
        """What is damaged, one phrase each (empty: intact)."""
        out = []
        if self.error:
            out.append(f"unreadable ({self.error})")
        if self.size == 0:
            out.append("empty segment (0 bytes): what it held is lost")
        if self.corrupt:
            lost = (
                f"{_count(self.lost_messages, 'message')} lost"
                if self.lost_messages
                else "how many messages they held is unknown"
            )
            out.append(f"{_count(self.corrupt, 'corrupt record')} ({lost})")
        elif self.lost_messages:  # a hole: the count marks miss messages no record shows
            out.append(f"{_count(self.lost_messages, 'message')} missing (per its count marks)")
        if self.cursor_past_end is not None:
            out.append(
                f"cursor offset {self.cursor_past_end} past the end ({self.size} bytes): "
                "replayed from its start (possible duplicates)"
            )
        return out


@dataclass(slots=True)
class SpoolReport:
    directory: Path
    segments: list[Segment] = field(default_factory=list)
    #: Entries that are neither segments nor the cursor (directories end in ``/``).
    unknown: list[str] = field(default_factory=list)
    #: The store's own files present (``cursor``, ``cursor.tmp``).
    own_files: list[str] = field(default_factory=list)
    #: Cursor lines naming a segment that is gone (read and deleted before a crash, or
    #: removed or renamed): a note, not damage, as the first is harmless.
    cursor_gone: list[str] = field(default_factory=list)
    #: Why the cursor could not be read (empty: it could, or there is none).
    cursor_error: str = ""
    #: What the write-ahead journal's segments still owe (replayed at the next start).
    journal: Recovered = field(default_factory=Recovered)
    journal_bytes: int = 0

    @property
    def damaged(self) -> list[Segment]:
        return [segment for segment in self.segments if segment.damaged]

    @property
    def intact(self) -> bool:
        return not self.damaged and not self.cursor_error and not self.journal.damaged_records

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def records(self) -> int:
        return sum(segment.records for segment in self.segments)

    @property
    def messages(self) -> int:
        return sum(segment.messages for segment in self.segments)

    @property
    def corrupt(self) -> int:
        return sum(segment.corrupt for segment in self.segments)

    @property
    def lost_messages(self) -> int:
        return sum(segment.lost_messages for segment in self.segments)


def check_directory(directory: Path) -> None:
    if not directory.exists():
        raise NotASpoolDirectory(f"{directory}: no such directory")
    if not directory.is_dir():
        raise NotASpoolDirectory(f"{directory}: not a directory")


def inspect_spool(directory: Path) -> SpoolReport:
    """Read ``directory`` as the daemon's replay would; change nothing."""
    check_directory(directory)
    report = SpoolReport(directory)
    sizes: dict[str, int] = {}
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if is_segment_name(entry.name) and entry.is_file(follow_symlinks=False):
                sizes[entry.name] = entry.stat(follow_symlinks=False).st_size
            elif (
                entry.name in OWN_FILES or is_journal_name(entry.name)
            ) and entry.is_file(follow_symlinks=False):
                report.own_files.append(entry.name)
            else:
                slash = "/" if entry.is_dir(follow_symlinks=False) else ""
                report.unknown.append(entry.name + slash)
    offsets: dict[str, int] = {}
    past_end: dict[str, int] = {}
    if CURSOR in report.own_files:
        try:
            text = (directory / CURSOR).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            report.cursor_error = str(exc)
            text = ""
        places = place_cursor(text, sizes)
        report.cursor_gone.extend(places.gone)
        offsets, past_end = places.offsets, places.past_end
    for name, size in sizes.items():
        report.segments.append(
            _read_segment(directory / name, size, offsets.get(name, 0), past_end.get(name))
        )
    journal = [directory / name for name in report.own_files if is_journal_name(name)]
    contents = []
    for path in journal:
        try:
            contents.append(path.read_bytes())
        except OSError as exc:
            report.unknown.append(f"{path.name} (unreadable: {exc.strerror or exc})")
    report.journal = recover(contents)
    report.journal_bytes = sum(len(data) for data in contents)
    return report


def _read_segment(path: Path, size: int, offset: int, past_end: int | None) -> Segment:
    """Scan ``path`` from ``offset`` in chunks, as :meth:`SpoolStore.read` does."""
    count = messages = corrupt = lost = 0
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            pending = b""
            tally = records.Tally(mark=0 if offset == 0 else None)
            while True:
                chunk = handle.read(max(CHUNK, records.first_record_size(pending) - len(pending)))
                data = pending + chunk
                result = records.scan(data, final=not chunk, tally=tally)
                count += len(result.records)
                messages += sum(records.message_count(k, b) for k, b in result.records)
                corrupt += result.corrupt
                lost += result.lost_messages
                pending = data[result.consumed :]
                if not chunk:
                    break
    except OSError as exc:
        return Segment(path.name, size, offset, error=exc.strerror or str(exc))
    return Segment(path.name, size, offset, count, messages, corrupt, lost, past_end)


def deletable(report: SpoolReport) -> list[str]:
    """The files :func:`empty_spool` deletes: the segments and the store's own files."""
    return [segment.name for segment in report.segments] + report.own_files


def empty_spool(report: SpoolReport) -> list[str]:
    """Delete the segments and the cursor ``report`` found; unknown entries stay.
    Returns the names deleted (one already gone is skipped)."""
    deleted = []
    for name in deletable(report):
        try:
            (report.directory / name).unlink()
        except FileNotFoundError:
            continue
        deleted.append(name)
    return deleted


def daemon_using(directory: Path, proc: Path = Path("/proc"), own_pid: int | None = None) -> int:
    """The pid of a running pulsar-bruce that uses ``directory`` (0: none found).

    The store holds no lock, so this asks ``/proc``: a process (not this one) whose
    command line mentions ``pulsar-bruce`` or ``pulsar_bruce`` and that has a file
    under ``directory`` open (``/proc/<pid>/fd`` links).  The daemon holds the tail
    segment open while it spools; a daemon that holds no spool file open at this
    moment (it is not spooling) is not found, nor are other users' processes unless
    this runs as root.  A best effort: stop the daemon first.
    """
    own_pid = os.getpid() if own_pid is None else own_pid
    target = os.path.realpath(directory)
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if int(pid) == own_pid:
            continue
        try:
            arguments = (proc / pid / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [argument.decode(errors="replace") for argument in arguments]
        if not any("pulsar-bruce" in word or "pulsar_bruce" in word for word in words):
            continue
        if _has_open_under(proc / pid / "fd", target):
            return int(pid)
    return 0


def _has_open_under(fd_directory: Path, target: str) -> bool:
    try:
        links = list(os.scandir(fd_directory))
    except OSError:
        return False
    for link in links:
        try:
            opened = os.readlink(link.path)
        except OSError:
            continue
        if _under(opened, target):
            return True
    return False


def _under(path: str, target: str) -> bool:
    if not path.startswith("/"):
        return False
    resolved = os.path.realpath(path)
    return resolved == target or resolved.startswith(target.rstrip("/") + "/")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
