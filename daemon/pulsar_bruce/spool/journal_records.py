"""The write-ahead journal's records, and what a journal holds after a crash.  Sans-IO.

The journal uses the spool's framing (``records.encode``: magic, length,
crc32c, kind) with its own kinds.  An *item* is one batch (open or sealed) or
the messages of one topic that wait for its partition count.

- ``PIECE``: bytes ``[offset, offset + len)`` of an item's batch entries, with
  the messages they hold.  Entries only grow, so pieces are slices of one byte
  string; a piece at offset 0 may repeat what earlier ones held (the journal
  copies a batch forward when it frees an old segment).
- ``NUMBER``: the producer name and first sequence id a batch was sent under,
  written before its frame reaches the broker; or no ids (-1, no name), with a
  flag byte after the name when an earlier write of the batch may be stored
  (``STORED_BEFORE``).  Journals written before the flag marked that with a
  name and no ids (``?`` where no name was known); both read the same.
- ``SETTLED``: items acked, discarded or moved to the spool.
- ``WAIT`` / ``WAIT_DONE``: a datagram waiting for its topic; all of a group's
  messages were routed (their pieces follow) or discarded.

:func:`recover` reads a journal's segments (oldest first) back into what is
still owed: batches (with the ids they were sent under, if any) and waiting
datagrams.  Damaged records are skipped and their messages counted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

import crc32c

from pulsar_bruce.batch.batch_builder import entry_offsets
from pulsar_bruce.spool import records
from pulsar_bruce.spool.records import SpooledBatch

PIECE: Final = 16
NUMBER: Final = 17
SETTLED: Final = 18
WAIT: Final = 19
WAIT_DONE: Final = 20
KINDS: Final = (PIECE, NUMBER, SETTLED, WAIT, WAIT_DONE)

_PIECE_HEAD = struct.Struct(">QIIiH")  # item, offset, messages, partition, topic length
_PIECE_START = struct.Struct(">BQIIiH")  # the kind, then the head
_NUMBER_HEAD = struct.Struct(">QqiH")  # item, first sequence id, partition, name length
_ITEM = struct.Struct(">Q")
#: The flag byte after a ``NUMBER`` record's name: an earlier write may be stored.
STORED_BEFORE: Final = b"\x01"
_WAIT_HEAD = struct.Struct(">QH")  # group item, topic length


def piece(
    item: int, offset: int, count: int, topic: bytes, partition: int, entries: bytes | bytearray
) -> bytes:
    """``records.encode(PIECE, head + topic + entries)``, with the entries copied once (this
    runs after every slab the journal takes)."""
    body = _PIECE_START.pack(PIECE, item, offset, count, partition, len(topic)) + topic
    crc = crc32c.crc32c(entries, crc32c.crc32c(body))
    header = records.HEADER.pack(records.MAGIC, len(body) + len(entries), crc)
    return b"".join((header, body, entries))


def number(
    item: int, sequence_id: int, partition: int, producer_name: str, stored_before: bool = False
) -> bytes:
    """The ids ``item`` goes under (-1: none); ``stored_before``: an earlier write of it may be
    stored (a reader before the flag ignores the byte after the name)."""
    name = producer_name.encode()
    head = _NUMBER_HEAD.pack(item, sequence_id, partition, len(name))
    return records.encode(NUMBER, head + name + (STORED_BEFORE if stored_before else b""))


def settled(items: list[int]) -> bytes:
    return records.encode(SETTLED, struct.pack(f">{len(items)}Q", *items))


def wait(group: int, topic: bytes, datagram: bytes) -> bytes:
    return records.encode(WAIT, _WAIT_HEAD.pack(group, len(topic)) + topic + datagram)


def wait_done(group: int) -> bytes:
    return records.encode(WAIT_DONE, _ITEM.pack(group))


def messages_in(payload: bytes, length: int) -> int:
    """Messages a damaged record held, where its header is still plausible (else 0)."""
    if not payload:
        return 0
    if payload[0] == WAIT:
        return 1
    if payload[0] != PIECE or len(payload) < 1 + _PIECE_HEAD.size:
        return 0
    count = int(_PIECE_HEAD.unpack_from(payload, 1)[2])
    return count if 0 < count <= (length - 1 - _PIECE_HEAD.size) // 6 else 0


# -- reading a journal back ---------------------------------------------------------------


@dataclass(slots=True)
class _Item:
    topic: str = ""
    partition: int = 0
    #: (offset, entries) in the order written.
    pieces: list[tuple[int, bytes]] = field(default_factory=list)
    sequence_id: int = -1
    producer_name: str = ""
    stored_before: bool = False
    #: WAIT groups: the datagrams, in order.
    datagrams: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class Recovered:
    """What a journal still owes: replay ``batches`` (item order) and ``datagrams``."""

    batches: list[SpooledBatch] = field(default_factory=list)
    datagrams: list[bytes] = field(default_factory=list)
    damaged_records: int = 0
    #: Messages in damaged records (as far as their headers tell) or in gaps between pieces.
    lost_messages: int = 0
    #: The highest item number seen (new items are numbered above it).
    last_item: int = -1

    @property
    def messages(self) -> int:
        return sum(batch.count for batch in self.batches) + len(self.datagrams)


def recover(segments: list[bytes]) -> Recovered:
    """Read whole segment files (oldest first) into what was not settled."""
    items: dict[int, _Item] = {}
    done: set[int] = set()
    result = Recovered()
    for data in segments:
        scanned = records.scan(data, final=True, kinds=KINDS, count=messages_in)
        result.damaged_records += scanned.corrupt
        result.lost_messages += scanned.lost_messages
        for kind, body in scanned.records:
            _apply(kind, body, items, done, result)
    for item_id in sorted(items):
        if item_id in done:
            continue
        item = items[item_id]
        if item.datagrams:
            result.datagrams.extend(item.datagrams)
            continue
        entries = _assemble(item.pieces)
        if not entries:
            continue
        count = len(entry_offsets(entries))
        result.batches.append(
            SpooledBatch(
                item.topic,
                item.partition,
                item.sequence_id,
                count,
                entries,
                item.producer_name,
                item.stored_before,
            )
        )
    return result


def _apply(
    kind: int, body: bytes, items: dict[int, _Item], done: set[int], result: Recovered
) -> None:
    if kind in (SETTLED, WAIT_DONE):
        done.update(struct.unpack(f">{len(body) // 8}Q", body[: len(body) // 8 * 8]))
        return
    if kind == PIECE:
        item_id, offset, _count, partition, topic_length = _PIECE_HEAD.unpack_from(body)
        start = _PIECE_HEAD.size
        item = items.setdefault(item_id, _Item())
        item.topic = body[start : start + topic_length].decode()
        item.partition = partition
        item.pieces.append((offset, body[start + topic_length :]))
    elif kind == NUMBER:
        item_id, sequence_id, partition, name_length = _NUMBER_HEAD.unpack_from(body)
        item = items.setdefault(item_id, _Item())
        item.sequence_id, item.partition = sequence_id, partition
        end = _NUMBER_HEAD.size + name_length
        name = body[_NUMBER_HEAD.size : end].decode()
        flagged = body[end : end + 1] == STORED_BEFORE
        # Before the flag, a name without ids said the same ("?": no name known).
        item.stored_before = sequence_id < 0 and (flagged or bool(name))
        item.producer_name = name if sequence_id >= 0 else ""
    else:  # WAIT
        item_id, topic_length = _WAIT_HEAD.unpack_from(body)
        item = items.setdefault(item_id, _Item())
        item.datagrams.append(body[_WAIT_HEAD.size + topic_length :])
    result.last_item = max(result.last_item, item_id)


def _assemble(pieces: list[tuple[int, bytes]]) -> bytes:
    """An item's entries from its pieces: each a slice of one growing byte string, cut at
    entry boundaries, so overlaps agree and a gap (a damaged piece) leaves whole entries."""
    out: list[bytes] = []
    reached = 0
    for offset, data in sorted(pieces, key=lambda p: (p[0], -len(p[1]))):
        end = offset + len(data)
        if end <= reached:
            continue
        out.append(data[max(reached - offset, 0) :])
        reached = end
    return b"".join(out)
