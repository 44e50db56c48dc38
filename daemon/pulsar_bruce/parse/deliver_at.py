"""Delayed delivery inside a message's batch entry, from parsing to its Send frame. Sans-IO.

A Message record may ask for delayed delivery (``DeliverAt``, epoch ms, or
``DeliverAfter``, ms from when the daemon reads it).  Pulsar carries that in
``MessageMetadata.deliver_at_time``, which exists only once per Send frame, so
such a message is never batched (as the Java client's
``ProducerImpl.canAddToBatch``): it is a batch of its own, framed as a
non-batched message.

Between parsing and framing, the time travels in the message's own entry, as a
field of its ``SingleMessageMetadata`` that Pulsar does not define (1000:
deliver at, 1001: deliver after), written first, so that the journal and the
spool keep it with the message and every stage can see it with one prefix
test, no lookup.  The intake turns "after" into "at" on its clock when the
message is read (:func:`resolve_after`); framing takes the field out again
(:func:`take_deliver_at`): it never reaches a broker.
"""

from __future__ import annotations

import time
from typing import Final

from pulsar_bruce.frame.wire import varint

#: The tag of field 1000 (varint): deliver at, epoch ms.
DELIVER_AT_TAG: Final = varint(1000 << 3)
#: The tag of field 1001 (varint): deliver after, ms from when the message is read.
DELIVER_AFTER_TAG: Final = varint(1001 << 3)
#: Both tags are two bytes that differ in their first: what :func:`is_delayed` tests.
_FIRST_BYTES: Final = (DELIVER_AT_TAG[0], DELIVER_AFTER_TAG[0])
assert DELIVER_AT_TAG[1:] == DELIVER_AFTER_TAG[1:] and len(DELIVER_AT_TAG) == 2


def epoch_ms() -> int:
    """Now, in ms since the epoch: the clock "deliver after" counts from (the intake's
    default; tests give it their own)."""
    return time.time_ns() // 1_000_000


def deliver_at_field(deliver_at_ms: int) -> bytes:
    return DELIVER_AT_TAG + varint(deliver_at_ms)


def deliver_after_field(deliver_after_ms: int) -> bytes:
    return DELIVER_AFTER_TAG + varint(deliver_after_ms)


def is_delayed(fields: bytes, offset: int = 0) -> bool:
    """Do the metadata fields at ``offset`` begin with a delivery time?"""
    return (
        len(fields) > offset + 1
        and fields[offset] in _FIRST_BYTES
        and fields[offset + 1] == DELIVER_AT_TAG[1]
    )


def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7


def resolve_after(fields: bytes, now_ms: int) -> bytes:
    """``fields`` with a leading "deliver after" turned into "deliver at" (``now_ms`` plus
    the delay); unchanged otherwise."""
    if not fields.startswith(DELIVER_AFTER_TAG):
        return fields
    after, end = _read_varint(fields, len(DELIVER_AFTER_TAG))
    return deliver_at_field(now_ms + after) + fields[end:]


def take_deliver_at(metadata: bytes) -> tuple[int, bytes]:
    """The delivery time at the head of a ``SingleMessageMetadata`` (0: none) and the
    metadata without it."""
    if not metadata.startswith(DELIVER_AT_TAG):
        return 0, metadata
    deliver_at, end = _read_varint(metadata, len(DELIVER_AT_TAG))
    return deliver_at, metadata[end:]
