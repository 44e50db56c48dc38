"""The spool directory's layout: which files are the store's, and the cursor's format.

Shared by the store (``store.py``), which writes and reads them, and
``pulsar-bruce spool`` (``inspect.py``), which only looks, so both read a
directory by the same rules.  The store's whole-file writes (the cursor, a
shutdown's front segment) are here too: all or nothing.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

#: The names the store gives its files.
CURSOR = "cursor"
SEGMENT_SUFFIX = ".spool"
OWN_FILES = (CURSOR, CURSOR + ".tmp")
#: The write-ahead journal's segments: ``journal-<n>.log`` (see ``journal.py``).
JOURNAL_PREFIX = "journal-"
JOURNAL_SUFFIX = ".log"


def is_journal_name(name: str) -> bool:
    """``journal-<n>.log``: a segment of the write-ahead journal."""
    middle = name.removeprefix(JOURNAL_PREFIX).removesuffix(JOURNAL_SUFFIX)
    return name.startswith(JOURNAL_PREFIX) and name.endswith(JOURNAL_SUFFIX) and middle.isdigit()


def journal_number(name: str) -> int:
    """The number of a journal segment named by :func:`journal_name`."""
    return int(name.removeprefix(JOURNAL_PREFIX).removesuffix(JOURNAL_SUFFIX))


def journal_name(number: int) -> str:
    return f"{JOURNAL_PREFIX}{number:010d}{JOURNAL_SUFFIX}"


def is_segment_name(name: str) -> bool:
    """``seg-*.spool``: a name the store reads as a segment (when it is a regular file)."""
    return name.startswith("seg-") and name.endswith(SEGMENT_SUFFIX)


def parse_cursor(text: str) -> list[tuple[str, int]]:
    """The cursor file's ``<segment> <offset>`` lines, in order; offset 0 where a line
    has no positive offset (such a segment is read from its start)."""
    out = []
    for line in text.splitlines():
        name, _, offset = line.partition(" ")
        out.append((name, int(offset) if offset.strip().isdigit() else 0))
    return out


@dataclass
class CursorPlaces:
    """What the cursor's lines say of the segments there are (their sizes)."""

    #: Read offsets of partly read segments.
    offsets: dict[str, int] = field(default_factory=dict)
    #: Segments named with an offset that are gone.
    gone: list[str] = field(default_factory=list)
    #: Segments shorter than their offset: name -> offset (replayed from their start).
    past_end: dict[str, int] = field(default_factory=dict)
    #: Every segment name the lines mention (never given to a new segment).
    named: list[str] = field(default_factory=list)


def place_cursor(text: str, sizes: dict[str, int]) -> CursorPlaces:
    """The cursor file's ``text`` read against the segments' ``sizes``."""
    places = CursorPlaces()
    for name, offset in parse_cursor(text):
        places.named.append(name)
        if offset <= 0:
            continue
        if name not in sizes:
            places.gone.append(name)
        elif offset > sizes[name]:
            places.past_end[name] = offset
        else:
            places.offsets[name] = offset
    return places


def cursor_text(offsets: dict[str, int]) -> str:
    # One line, no newline, when one segment is partly read: what earlier versions read.
    return "\n".join(f"{name} {offset}" for name, offset in sorted(offsets.items()))


def write_cursor(directory: Path, text: str, durable: bool) -> None:
    """Replace the cursor file atomically; ``durable`` also fsyncs it and the directory."""
    temporary = directory / (CURSOR + ".tmp")
    with temporary.open("w") as handle:
        handle.write(text)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    temporary.replace(directory / CURSOR)
    if durable:
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def append_whole(path: Path, chunks: list[bytes], durable: bool) -> int:
    """Append ``chunks`` to ``path`` (created if need be) and return the bytes written;
    after an OSError, ``path`` is as it was (or gone, if it was new)."""
    start = path.stat().st_size if path.exists() else -1
    written = 0
    try:
        with path.open("ab") as handle:
            for chunk in chunks:
                handle.write(chunk)
                written += len(chunk)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            if start < 0:
                path.unlink()
            else:
                os.truncate(path, start)
        raise
    return written


def size(path: Path) -> int:
    """A file's size, 0 when it cannot be read (it is gone, or no file)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def number(name: str) -> int:
    """A segment's sequence number, which orders segments (0 when the name has none)."""
    digits = name.removeprefix("seg-").split(".", 1)[0]
    return int(digits) if digits.isdigit() else 0
