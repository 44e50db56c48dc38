"""The stream connection's Producer record (parse/producer_record.py): golden bytes, its
checks, and where a connection may send it (first, or again on a sequenced connection)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pulsar_bruce.input.stream_server import StreamConnection
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.parse.producer_record import (
    decode_producer_record,
    encode_producer_record,
    is_producer_record,
)
from pulsar_bruce.route.intake import admit_each
from to_pulsar.protocol import encode_flush_request

from tests.support.fakes_asyncio import FakeTransport
from tests.unit.daemon.input.test_stream_server import FakeIntake, record

GOLDEN = (
    b"\x00\x00\x00\x1a"  # Size 26
    b"\x01\x05"  # ApiKey 261
    b"\x00\x00\x00\x00"  # ApiVersion 0, Flags 0
    b"\x00\x06job-42"  # NameSize, Name
    b"\x00\x00\x00\x05\x00\x00\x00\x07"  # FirstSequenceId 5 << 32 | 7
)


def test_golden_bytes() -> None:
    assert encode_producer_record("job-42", (5 << 32) | 7) == GOLDEN
    assert decode_producer_record(GOLDEN) == ("job-42", (5 << 32) | 7)
    assert is_producer_record(GOLDEN) and not is_producer_record(record(b"v"))


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (GOLDEN[:-1], "Size 26 for 25 bytes"),
        (GOLDEN[:10] + b"\x00\x07" + GOLDEN[12:], "name size 7"),
        (GOLDEN[:6] + b"\x00\x01" + GOLDEN[8:], "version 1"),
        (GOLDEN[:8] + b"\x00\x02" + GOLDEN[10:], "flags 2"),
        (encode_producer_record("a\x07b", 0), "control characters"),
        (encode_producer_record("job", -1), "negative"),
        (encode_producer_record("", 0), "name size 0"),
        (encode_producer_record("x" * 256, 0), "name size 256"),
        (GOLDEN[:12] + b"\xff" + GOLDEN[13:], "not UTF-8"),
    ],
)
def test_what_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_producer_record(raw)


@given(st.binary(max_size=300))
def test_any_bytes_decode_or_raise_value_error(raw: bytes) -> None:
    try:
        name, first_id = decode_producer_record(raw)
    except ValueError:
        return
    assert encode_producer_record(name, first_id) == raw


class FakeSequenced:
    def __init__(self, name: str, first_id: int, intake: FakeIntake) -> None:
        self.name, self.first_id, self.intake = name, first_id, intake
        self.admitted: list[bytes] = []
        self.ended = False

    def admit_records(
        self, records: list[bytes], start: int, tag: Confirmation, stop_api_key: int, /
    ) -> int:
        def admit(data: bytes, tag: Confirmation | None = None) -> bool:
            if is_producer_record(data):
                return False
            self.admitted.append(data)
            if tag is not None:
                tag.outstanding += 1
            return True

        return admit_each(admit, records, start, tag, stop_api_key)

    def end(self) -> None:
        self.ended = True


class Rig:
    def __init__(self) -> None:
        self.intake = FakeIntake()
        self.sequenced: list[FakeSequenced] = []
        self.transport = FakeTransport()
        self.connection = StreamConnection(self.intake, self, None)
        self.connection.connection_made(self.transport)

    def after_drain(self) -> None:
        pass

    def sequenced_sender(self, name: str, first_id: int) -> FakeSequenced:
        self.sequenced.append(FakeSequenced(name, first_id, self.intake))
        return self.sequenced[-1]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_a_first_producer_record_sends_the_connections_records_under_its_name() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(
            encode_producer_record("a", 0) + record(b"v1") + encode_flush_request(1)
            + encode_producer_record("b", 9) + record(b"v2")
        )  # fmt: skip
        assert [(s.name, s.first_id) for s in rig.sequenced] == [("a", 0), ("b", 9)]
        assert rig.sequenced[0].ended and not rig.sequenced[1].ended
        assert [len(s.admitted) for s in rig.sequenced] == [1, 1]
        assert rig.intake.admitted == []
        rig.connection.connection_lost(None)
        assert rig.sequenced[1].ended

    run(test)


def test_a_producer_record_after_other_records_is_the_intakes_to_discard() -> None:
    async def test() -> None:
        rig = Rig()
        late = encode_producer_record("a", 0)
        rig.connection.data_received(record(b"v1") + late)
        assert rig.sequenced == []
        assert [data for data, _ in rig.intake.admitted] == [record(b"v1"), late]

    run(test)


def test_a_malformed_producer_record_closes_the_connection() -> None:
    async def test() -> None:
        rig = Rig()
        rig.connection.data_received(encode_producer_record("a", -5) + record(b"v1"))
        assert "close" in rig.transport.calls
        assert rig.sequenced == [] and rig.intake.admitted == []

    run(test)
