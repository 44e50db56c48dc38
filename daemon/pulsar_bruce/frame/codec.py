"""Pulsar binary-protocol framing, sans-IO.

Simple frame::

    [totalSize:u32][commandSize:u32][BaseCommand]

Payload frame (Send, Message)::

    [totalSize:u32][commandSize:u32][BaseCommand]
    [magic 0x0e01:u16][crc32c:u32][metadataSize:u32][MessageMetadata][payload]

``totalSize`` counts everything after itself; the CRC-32C covers everything
after the checksum field.  Incoming payload frames may carry a broker-entry
metadata block (magic ``0x0e02``) before the ``0x0e01`` block; it is skipped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from pulsar_bruce.frame import pulsar_api_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

#: Largest frame the broker accepts unless ``CommandConnected`` says otherwise.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Room kept for the command and metadata next to a payload (Pulsar clients use 10 KiB).
FRAME_OVERHEAD_ALLOWANCE = 10 * 1024

_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")
_U16 = struct.Struct(">H")
_SEND_PREFIX = struct.Struct(">II")  # totalSize, commandSize
_CHECKSUM_BLOCK = struct.Struct(">HI")  # magic, crc32c


class FrameError(Exception):
    """The byte stream from the broker is not valid Pulsar framing; drop the connection."""


@dataclass(slots=True)
class Frame:
    """One decoded frame: its command and, for payload frames, metadata and payload."""

    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: bytes = b""


def encode_command(command: pb.BaseCommand) -> bytes:
    """Frame a command that carries no payload."""
    body = command.SerializeToString()
    size = len(body)
    return _U32_PAIR.pack(size + 4, size) + body


def encode_payload_command(command: pb.BaseCommand, metadata: bytes, payload: bytes) -> bytes:
    """Frame a payload command; ``metadata`` is a serialized ``MessageMetadata``."""
    cmd = command.SerializeToString()
    checked = _U32.pack(len(metadata)) + metadata + payload
    checksum = crc32c.crc32c(checked)
    total = 4 + len(cmd) + 6 + len(checked)
    return b"".join(
        (
            _SEND_PREFIX.pack(total, len(cmd)),
            cmd,
            _CHECKSUM_BLOCK.pack(MAGIC_CRC32C, checksum),
            checked,
        )
    )


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get complete frames back.

    Handles partial frames and several frames per read.  Rejects frames larger
    than ``max_frame_size`` so a corrupt length cannot make us buffer forever.
    """

    __slots__ = ("_buffer", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + FRAME_OVERHEAD_ALLOWANCE):
        self._buffer = bytearray()
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes) -> list[Frame]:
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        offset = 0
        end = len(buffer)
        while end - offset >= 4:
            (total,) = _U32.unpack_from(buffer, offset)
            if total < 4 or total > self.max_frame_size:
                raise FrameError(f"bad frame size {total}")
            if end - offset - 4 < total:
                break
            frames.append(decode_frame_body(bytes(buffer[offset + 4 : offset + 4 + total])))
            offset += 4 + total
        if offset:
            del buffer[:offset]
        return frames


def decode_frame_body(body: bytes) -> Frame:
    """Decode one frame without its leading ``totalSize`` field."""
    if len(body) < 4:
        raise FrameError("frame shorter than its command size field")
    (command_size,) = _U32.unpack_from(body, 0)
    command_end = 4 + command_size
    if command_end > len(body):
        raise FrameError("command runs past the end of the frame")
    command = pb.BaseCommand()
    try:
        command.ParseFromString(body[4:command_end])
    except Exception as exc:  # protobuf raises DecodeError, sometimes others
        raise FrameError(f"undecodable command: {exc}") from exc
    if command_end == len(body):
        return Frame(command)
    return _decode_payload_section(command, body, command_end)


def _decode_payload_section(command: pb.BaseCommand, body: bytes, offset: int) -> Frame:
    if len(body) - offset < 2:
        raise FrameError("truncated payload section")
    (magic,) = _U16.unpack_from(body, offset)
    if magic == MAGIC_BROKER_ENTRY_METADATA:
        if len(body) - offset < 6:
            raise FrameError("truncated broker entry metadata")
        (entry_size,) = _U32.unpack_from(body, offset + 2)
        offset += 6 + entry_size
        if len(body) - offset < 2:
            raise FrameError("truncated payload section after broker entry metadata")
        (magic,) = _U16.unpack_from(body, offset)
    if magic != MAGIC_CRC32C or len(body) - offset < 10:
        raise FrameError(f"bad payload magic {magic:#06x}")
    (checksum,) = _U32.unpack_from(body, offset + 2)
    checked = body[offset + 6 :]
    if crc32c.crc32c(checked) != checksum:
        raise FrameError("payload checksum mismatch")
    (metadata_size,) = _U32.unpack_from(checked, 0)
    if 4 + metadata_size > len(checked):
        raise FrameError("metadata runs past the end of the frame")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(checked[4 : 4 + metadata_size])
    except Exception as exc:
        raise FrameError(f"undecodable metadata: {exc}") from exc
    return Frame(command, metadata, checked[4 + metadata_size :])
