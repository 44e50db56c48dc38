"""The stream socket's Producer record: publish what follows under this name and these ids.

    Producer (ApiKey 261, ApiVersion 0)   client -> daemon
      Size:int32 ApiKey:int16 ApiVersion:int16 Flags:int16 (=0)
      NameSize:int16 Name FirstSequenceId:int64

All integers big-endian; ``Size`` counts the whole record.  ``Name`` is UTF-8,
1..255 bytes, without control characters (it becomes a Pulsar producer name);
``FirstSequenceId`` is at least 0.  Sans-IO.
"""

from __future__ import annotations

import struct
from typing import Final

API_KEY_PRODUCER: Final = 261
MAX_NAME_BYTES: Final = 255

_HEAD = struct.Struct(">ihhhh")  # Size, ApiKey, ApiVersion, Flags, NameSize
_FIRST_ID = struct.Struct(">q")


def is_producer_record(record: bytes) -> bool:
    return len(record) >= 6 and int.from_bytes(record[4:6], "big") == API_KEY_PRODUCER


def decode_producer_record(record: bytes) -> tuple[str, int]:
    """The record's producer name and first sequence id; ValueError saying what is wrong."""
    if len(record) < _HEAD.size + _FIRST_ID.size:
        raise ValueError(f"Producer record of {len(record)} bytes is too short")
    size, api_key, version, flags, name_size = _HEAD.unpack_from(record)
    if api_key != API_KEY_PRODUCER:
        raise ValueError("not a Producer record")
    if size != len(record):
        raise ValueError(f"Producer record Size {size} for {len(record)} bytes")
    if version != 0 or flags != 0:
        raise ValueError(f"Producer record version {version}, flags {flags}: only 0, 0")
    if not 0 < name_size <= MAX_NAME_BYTES or size != _HEAD.size + name_size + _FIRST_ID.size:
        raise ValueError(f"Producer record name size {name_size} (1..{MAX_NAME_BYTES})")
    try:
        name = record[_HEAD.size : _HEAD.size + name_size].decode()
    except UnicodeDecodeError:
        raise ValueError("Producer record name is not UTF-8") from None
    if not name.isprintable():
        raise ValueError("Producer record name has control characters")
    (first_id,) = _FIRST_ID.unpack_from(record, _HEAD.size + name_size)
    if first_id < 0:
        raise ValueError(f"Producer record first sequence id {first_id} is negative")
    return name, first_id


def encode_producer_record(name: str, first_sequence_id: int) -> bytes:
    """The record (for tests and tools; the client library has its own encoder)."""
    raw = name.encode()
    size = _HEAD.size + len(raw) + _FIRST_ID.size
    return _HEAD.pack(size, API_KEY_PRODUCER, 0, 0, len(raw)) + raw + _FIRST_ID.pack(
        first_sequence_id
    )
