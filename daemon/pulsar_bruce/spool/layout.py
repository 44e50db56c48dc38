"""The spool directory's layout: which files are the store's, and the cursor's format.

Shared by the store (``store.py``), which writes and reads them, and
``pulsar-bruce spool`` (``inspect.py``), which only looks, so both read a
directory by the same rules.
"""

from __future__ import annotations

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
