"""Spool record format, sans-IO.

A spool file is a run of records::

    [magic u32 "BRSP"][length u32][crc32c u32][kind u8][body: length - 1 bytes]

``crc32c`` covers kind and body.  The magic lets a reader resynchronise after
a corrupt record; a torn tail (a record cut short by a crash) is detected by
its length or checksum, counted and skipped, never replayed as garbage.

Kinds: ``DATAGRAM`` (a Bruce datagram exactly as received), ``BATCH`` (a
sealed batch taken out of memory at shutdown: topic, partition, sequence id,
message count and the uncompressed batch entries), ``PRODUCED_BATCH`` (the
same for a batch that had been sent, plus the producer name its sequence ids
belong to, so its replay can reuse them and a broker with deduplication
enabled can drop it if it had stored it; with sequence id -1, a batch that lost
its ids but may be stored under earlier ones: its replay is a possible duplicate)
and ``COUNT`` (a mark: how many messages the file held up to it).

A damaged stretch of a file (flipped bytes, a hole) may hide several records,
their headers included, so the headers alone cannot say how many messages it
held.  The marks can: given a :class:`Tally` (kept across the chunks of one
file), :func:`scan` counts what a damaged stretch held as the next intact
mark's count minus the messages read since the mark before it, exactly.  A
damaged stretch after the file's last intact mark, or in a file without marks
(written by an earlier version), is counted from the damaged records' headers.
Marks are consumed by :func:`scan`, never returned as records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import crc32c

MAGIC: Final = b"BRSP"
DATAGRAM: Final = 1
BATCH: Final = 2
PRODUCED_BATCH: Final = 3
COUNT: Final = 4
KINDS: Final = (DATAGRAM, BATCH, PRODUCED_BATCH, COUNT)

HEADER: Final = struct.Struct(">4sII")  # magic, length, crc
_BATCH_HEAD = struct.Struct(">HiqI")  # topic length, partition, sequence id, count
_NAME_LENGTH = struct.Struct(">H")  # PRODUCED_BATCH: producer name length, after the topic
#: The name a ``PRODUCED_BATCH`` without ids carries when the batch had none (its mark:
#: an earlier write may be stored; the name itself is not used for such a record).
STORED_BEFORE_NAME: Final = "-"

_COUNT = struct.Struct(">Q")  # COUNT: messages written to the file before the mark
HEADER_SIZE: Final = HEADER.size
#: The size of a ``COUNT`` mark.
MARK_SIZE: Final = HEADER_SIZE + 1 + _COUNT.size
#: Largest body we believe; anything larger is corruption.
MAX_RECORD: Final = 64 * 1024 * 1024


def encode(kind: int, body: bytes) -> bytes:
    payload = bytes((kind,)) + body
    return HEADER.pack(MAGIC, len(payload), crc32c.crc32c(payload)) + payload


def encode_batch(
    topic: str,
    partition: int,
    sequence_id: int,
    count: int,
    entries: bytes,
    producer_name: str = "",
    stored_before: bool = False,
) -> bytes:
    """A ``BATCH`` record, or a ``PRODUCED_BATCH`` one when ``producer_name`` is given;
    ``stored_before`` without ids (``sequence_id`` -1): a ``PRODUCED_BATCH`` whatever the
    name (the reader takes a name without ids for that mark, :func:`decode_batch`)."""
    if stored_before and sequence_id < 0:
        producer_name = producer_name or STORED_BEFORE_NAME
    name = topic.encode()
    head = _BATCH_HEAD.pack(len(name), partition, sequence_id, count) + name
    if not producer_name:
        return encode(BATCH, head + entries)
    producer = producer_name.encode()
    return encode(PRODUCED_BATCH, head + _NAME_LENGTH.pack(len(producer)) + producer + entries)


def count_mark(messages: int) -> bytes:
    """A ``COUNT`` mark: the file held ``messages`` messages before it."""
    return encode(COUNT, _COUNT.pack(messages))


@dataclass(frozen=True, slots=True)
class SpooledBatch:
    topic: str
    partition: int
    sequence_id: int
    count: int
    entries: bytes
    #: The producer name ``sequence_id`` belongs to (empty: the batch had not been sent).
    producer_name: str = ""
    #: Without ids, but an earlier write of it may be stored (its replay is a possible
    #: duplicate): the journal's record says so (``journal_records.number``).
    stored_before: bool = False


def decode_batch(body: bytes, kind: int = BATCH) -> SpooledBatch:
    name_length, partition, sequence_id, count = _BATCH_HEAD.unpack_from(body, 0)
    start = _BATCH_HEAD.size
    topic = body[start : start + name_length].decode()
    start += name_length
    producer_name = ""
    if kind == PRODUCED_BATCH:
        (producer_length,) = _NAME_LENGTH.unpack_from(body, start)
        start += _NAME_LENGTH.size
        producer_name = body[start : start + producer_length].decode()
        start += producer_length
    stored_before = bool(producer_name) and sequence_id < 0  # (as the journal's older records)
    return SpooledBatch(
        topic, partition, sequence_id, count, body[start:], producer_name, stored_before
    )


@dataclass(slots=True)
class ScanResult:
    """Records found in a chunk of a spool file, and what could not be read."""

    records: list[tuple[int, bytes]]
    #: Bytes consumed (whole records and skipped garbage); the rest is an incomplete tail.
    consumed: int
    corrupt: int = 0
    #: Messages lost to damage: as the marks tell (see :class:`Tally`), else as far as the
    #: damaged records' headers tell (the rest cannot be known): never lost silently.
    lost_messages: int = 0


@dataclass(slots=True)
class Tally:
    """Where one file's reading stands with its ``COUNT`` marks, across chunks."""

    #: Messages the file held before the last mark read: 0 at its start, None when the
    #: reading began past the start and has met no mark yet (nothing to count from).
    mark: int | None = 0
    #: Messages in the intact records read since.
    seen: int = 0
    #: Messages in the damaged records since, as far as their headers tell.
    guessed: int = 0

    def at_mark(self, messages: int) -> int:
        """A mark says ``messages``: the messages lost since the last mark."""
        if self.mark is not None and messages >= self.mark + self.seen:
            lost = messages - self.mark - self.seen
        else:  # nothing to count from, or a mark of a file appended to afresh
            lost = self.guessed
        self.mark, self.seen, self.guessed = messages, 0, 0
        return lost

    def at_end(self) -> int:
        """The file's end: what the damage after its last mark held, per the headers."""
        lost, self.guessed = self.guessed, 0
        return lost


def scan(
    data: bytes,
    final: bool,
    kinds: tuple[int, ...] = KINDS,
    count: Callable[[bytes, int], int] | None = None,
    tally: Tally | None = None,
) -> ScanResult:
    """Read the records in ``data``.

    ``final``: ``data`` runs to the end of the file, so an incomplete record
    at the end is a torn tail (counted as corrupt and consumed) rather than a
    record still being written.  ``kinds`` and ``count`` (what a damaged
    record held, :func:`messages_in` by default) let the journal share the format.
    ``tally``: the file's, when ``data`` is one of its chunks (else a fresh one: ``data``
    is read from the file's start).
    """
    messages_in_damaged = messages_in if count is None else count
    tally = Tally() if tally is None else tally
    records: list[tuple[int, bytes]] = []
    corrupt = 0
    lost = 0
    offset = 0
    end = len(data)
    while offset < end:
        if end - offset < HEADER_SIZE:
            if final:
                corrupt += 1
                offset = end
            break
        magic, length, checksum = HEADER.unpack_from(data, offset)
        if magic != MAGIC or length == 0 or length > MAX_RECORD:
            corrupt += 1
            offset = _resync(data, offset + 1, final)
            continue
        body_end = offset + HEADER_SIZE + length
        if body_end > end:
            if final:
                corrupt += 1
                tally.guessed += messages_in_damaged(data[offset + HEADER_SIZE : body_end], length)
                offset = _resync(data, offset + 1, final)
                continue
            break
        payload = data[offset + HEADER_SIZE : body_end]
        kind = payload[0]
        if crc32c.crc32c(payload) != checksum or kind not in kinds:
            corrupt += 1
            tally.guessed += messages_in_damaged(payload, length)
            offset = _resync(data, offset + 1, final)
            continue
        offset = body_end
        if kind == COUNT:
            lost += tally.at_mark(_COUNT.unpack_from(payload, 1)[0])
            continue
        records.append((kind, payload[1:]))
        if kind == DATAGRAM:
            tally.seen += 1
        elif kind in (BATCH, PRODUCED_BATCH):  # not the journal's kinds
            tally.seen += message_count(kind, payload[1:])
    if final and offset >= end:
        lost += tally.at_end()
    return ScanResult(records, offset, corrupt, lost)


def messages_in(payload: bytes, length: int) -> int:
    """How many messages a record held, from what is left of it (0: cannot be known).

    The checksum failed, so each field is believed only where it is plausible: a
    known kind, and for a batch a count its ``length`` has room for (an entry
    takes at least 6 bytes: its size and a minimal metadata).
    """
    if not payload or payload[0] not in KINDS or payload[0] == COUNT:
        return 0
    if payload[0] == DATAGRAM:
        return 1
    if len(payload) < 1 + _BATCH_HEAD.size:
        return 0
    count = int(_BATCH_HEAD.unpack_from(payload, 1)[3])
    return count if 0 < count <= (length - 1 - _BATCH_HEAD.size) // 6 else 0


def message_count(kind: int, body: bytes) -> int:
    """Messages in an intact record."""
    return 1 if kind == DATAGRAM else int(_BATCH_HEAD.unpack_from(body, 0)[3])


def first_record_size(data: bytes) -> int:
    """Size of the record ``data`` starts with, per its header (0 if unknown or implausible)."""
    if len(data) < HEADER_SIZE:
        return 0
    magic, length, _ = HEADER.unpack_from(data, 0)
    if magic != MAGIC or length > MAX_RECORD:
        return 0
    return HEADER_SIZE + int(length)


def _resync(data: bytes, start: int, final: bool) -> int:
    """Offset of the next magic at or after ``start``; else the end, less (unless
    ``final``) the last bytes, which may start a magic the next chunk completes."""
    found = data.find(MAGIC, start)
    if found >= 0:
        return found
    return len(data) if final else max(start, len(data) - len(MAGIC) + 1)


def iter_records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """All intact records of a complete file (tests and tools)."""
    yield from scan(data, final=True).records
