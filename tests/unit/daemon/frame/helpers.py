"""What the frame tests share: golden bytes written as hex, the CRC-32C written from
its spec, one frame decoded."""

from __future__ import annotations

from pulsar_bruce.frame.codec import Frame, FrameDecoder

TOPIC = b"persistent://public/default/t"  # 29 bytes = 0x1d
assert len(TOPIC) == 0x1D


def wire(*parts: str | bytes) -> bytes:
    """Hex strings (spaces allowed) and raw byte strings, concatenated."""
    return b"".join(bytes.fromhex(p) if isinstance(p, str) else p for p in parts)


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), written from the spec."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def decode_one(data: bytes) -> Frame:
    frames = FrameDecoder().feed(data)
    assert len(frames) == 1
    return frames[0]


SEND_METADATA = wire(
    "0a 03",  # producer_name (1), 3 bytes
    b"p-1",
    "10 05",  # sequence_id (2) = 5
    "18 e8 07",  # publish_time (3) = 1000
    "58 02",  # num_messages_in_batch (11) = 2
    "c0 01 06",  # highest_sequence_id (24) = 6
)  # 15 bytes
