"""The senders' topic-name rule (``to_pulsar.topics``) is the daemon's (``parse.topic``).

Two copies, since neither package may import the other; this test holds them together
and checks that every sender refuses a bad name before anything is sent.
"""

from __future__ import annotations

import socket

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from to_pulsar import InvalidMessageError, Sender, StreamSender
from to_pulsar.bulk import Columns, encode_columns
from to_pulsar.encoding import (
    encode_any_partition,
    encode_message_record,
    encode_partition_key,
    encode_plain,
)
from to_pulsar.topics import check_topic, full_topic_name

from tests.support.fakestream import FakeStreamDaemon

normalize_topic = pytest.importorskip("pulsar_bruce.parse.topic").normalize_topic

#: Pieces that sit on the rule's edges: separators, the domains, characters that are
#: word characters in Unicode but not in ASCII, Unicode whitespace, control characters.
PIECES = [
    *("", "a", "Z9", "t", "-", "=", ":", ".", "_", "/", "//", "://", ":/"),
    *("persistent", "non-persistent", "persistent://", "public", "default", "-partition-3"),
    *(" ", "\t", "\n", "\x00", "\x1f", "\x7f", "\x85", "\x9f", "\xa0", "\u2028", "\u3000"),
    *("é", "ß", "名", "!", "*", "?", "%", "\ud800"),
]
names = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=9).map("".join),
    st.text(max_size=24),
).map(lambda text: text.encode("utf-8", "surrogatepass")) | st.binary(max_size=24)


def sender_side(raw: bytes) -> str | None:
    try:
        return full_topic_name(raw)
    except InvalidMessageError:
        return None


@given(names)
@example(b"bad topic/with spaces!")
@example(b"a/b/c/d")
@example(b"persistent://a/b/c")
@example(b"non-persistent://a/b")
@example("caf\xe9/ns/t".encode())
def test_the_senders_and_the_daemon_agree(raw: bytes) -> None:
    assert sender_side(raw) == normalize_topic(raw)


@pytest.mark.parametrize(
    "encode",
    [
        lambda topic: encode_any_partition(topic, b"v"),
        lambda topic: encode_partition_key(3, topic, b"v"),
        lambda topic: encode_plain(topic, b"v", None, 1),
        lambda topic: encode_message_record(topic, b"v", b"", 1, None, {"p": "q"}),
    ],
)
@pytest.mark.parametrize("topic", ["a/b/c/d", "bad topic", b"a/b", "public/default/"])
def test_every_encoder_refuses_a_bad_topic(encode, topic: str | bytes) -> None:
    with pytest.raises(InvalidMessageError, match="invalid topic"):
        encode(topic)


def test_good_names_still_encode_and_are_remembered() -> None:
    for topic in ("t", "tenant/ns/t", "persistent://a/b/c", "non-persistent://a/b/c-partition-1"):
        assert encode_any_partition(topic, b"v")
        check_topic(topic.encode())  # cached: no error, no second parse needed


def test_sender_refuses_before_sending(sock_path, receiver: socket.socket) -> None:
    with Sender(sock_path) as sender:
        with pytest.raises(InvalidMessageError, match=r"invalid topic 'a/b/c/d'"):
            sender.send("a/b/c/d", b"v")
        sender.send("t", b"ok")
    assert receiver.recv(65536).endswith(b"ok")  # the bad one never went out


def test_stream_sender_refuses_before_sending(fake: FakeStreamDaemon) -> None:
    with StreamSender(fake.path) as sender:
        with pytest.raises(InvalidMessageError, match="invalid topic"):
            sender.send("bad topic", b"v", properties={"k": "v"})
        sender.send("t", b"ok")
        assert sender.flush().acked == 1
    assert len(fake.message_records()) == 1


def test_bulk_rows_with_a_bad_topic_are_invalid_not_sent() -> None:
    columns = Columns(values=[b"1", b"2", b"3"], topics=["t", "a/b/c/d", None])
    encoded = encode_columns(columns, "t", 5)
    assert encoded.count == 2
    assert [index for index, _ in encoded.invalid] == [1]
    assert "invalid topic 'a/b/c/d'" in encoded.invalid[0][1]
