"""Stream-socket framing and flush bookkeeping, sans-IO."""

from __future__ import annotations

import struct

import pytest
from pulsar_bruce.input.stream_session import (
    FramingError,
    StreamSession,
    encode_flush_request,
    encode_flush_response,
)
from to_pulsar.encoding import encode_any_partition


def decode_response(data: bytes) -> tuple[int, int, dict[str, int], int]:
    size, api_key, version, flags, request_id, acked, reasons = struct.unpack_from(
        ">ihhhqqh", data, 0
    )
    assert (api_key, version, flags) == (259, 0, 0)
    offset = struct.calcsize(">ihhhqqh")
    discarded = {}
    for _ in range(reasons):
        (length,) = struct.unpack_from(">h", data, offset)
        name = data[offset + 2 : offset + 2 + length].decode()
        (count,) = struct.unpack_from(">q", data, offset + 2 + length)
        discarded[name] = count
        offset += 2 + length + 8
    assert offset == size
    return request_id, acked, discarded, size


def test_flush_request_and_response_golden_bytes() -> None:
    assert encode_flush_request(7) == bytes.fromhex("00000012 0102 0000 0000 0000000000000007")
    assert encode_flush_response(7, 3, {"too_large": 1}) == bytes.fromhex(
        "0000002f 0103 0000 0000 0000000000000007 0000000000000003 0001"
        "0009" + b"too_large".hex() + "0000000000000001"
    )


def test_records_are_split_across_reads_and_flushes_answered_in_order() -> None:
    session = StreamSession(1 << 20, lambda: None)
    record = encode_any_partition("t", b"v")
    stream = record + encode_flush_request(1) + record + encode_flush_request(2)
    confirmations = []
    for byte in stream:  # one byte per read
        session.feed(bytes([byte]))
        for r in session.complete_records():
            if session.is_flush_request(r):
                session.flush_request(r)
            else:
                assert r == record
                session.current.outstanding += 1
                confirmations.append(session.current)
            session.consume(r)
    first, second = confirmations
    assert first is not second
    assert session.responses() == b""  # both flushes still wait for their message
    second.settle(1)  # the later message is acked first...
    assert session.responses() == b""  # ...but flush 1 must be answered before flush 2
    first.settle(1)
    data = session.responses()
    one = decode_response(data)
    two = decode_response(data[one[3] :])
    assert (one[:3], two[:3]) == ((1, 1, {}), (2, 1, {}))


def test_a_settled_flush_is_answered_with_its_counts() -> None:
    session = StreamSession(1 << 20, lambda: None)
    session.current.outstanding = 2
    confirmation = session.current
    confirmation.discard("malformed")
    session.flush_request(encode_flush_request(5))
    confirmation.settle(1)
    confirmation.settle(1, "send_timeout")
    request_id, acked, discarded, _ = decode_response(session.responses())
    assert (request_id, acked, discarded) == (5, 1, {"malformed": 1, "send_timeout": 1})


@pytest.mark.parametrize("size", [0, 7, -1, 10**9])
def test_lost_framing_is_an_error(size: int) -> None:
    session = StreamSession(1 << 20, lambda: None)
    session.feed(struct.pack(">ihh", size, 256, 0))
    with pytest.raises(FramingError):
        session.complete_records()
