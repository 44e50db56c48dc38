"""The intake: one admission path for datagrams and stream records (discards at the door,
rate and buffer limits, topics, stream records, outcomes), on the real sans-IO parts."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.producer.partition_producer import BatchPolicy
from to_pulsar.encoding import encode_any_partition

from tests.support.any_topic import to_any_topic
from tests.unit.daemon.route.intake_harness import (
    TEN,
    Harness,
    T,
    any_msg,
    bad_topic_datagram,
    charge_of,
    confirmation,
    discarded,
)


def test_the_charge_used_in_these_tests() -> None:
    assert charge_of(TEN) == 31


# -- discards at the door ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [
        (b"\x00\x00\x00", reasons.MALFORMED),
        (any_msg()[:-1], reasons.MALFORMED),
        (struct.pack(">ihh", 8, 999, 0), reasons.UNSUPPORTED_API_KEY),
        (struct.pack(">ihh", 8, 256, 1), reasons.UNSUPPORTED_VERSION),
    ],
)
def test_parser_reasons_are_counted(datagram: bytes, reason: str) -> None:
    h = Harness()
    h.send(datagram)
    assert discarded(h, reason) == 1
    assert h.ledger.received == 1
    assert h.ledger.buffered_messages == 0
    assert h.events.named("batch_opened") == h.events.named("batch_sealed") == []
    assert list(h.outcomes.recent_rejects) == [(reason, datagram[:64])]


def test_every_parser_reason_is_a_known_reason() -> None:
    h = Harness()
    for datagram in (b"", b"\xff" * 20, struct.pack(">ihh", 8, 256, 7)):
        h.send(datagram)
    assert sum(h.ledger.discarded.get(r, 0) for r in reasons.ALL) == 3
    assert h.ledger.discarded_total == 3


def test_too_large_is_counted_before_parsing() -> None:
    h = Harness(max_message_bytes=100)
    h.send(any_msg(value=b"x" * 100))
    assert discarded(h, reasons.TOO_LARGE) == 1
    assert len(h.registry) == 0  # never even parsed
    assert h.added == []


def test_exactly_max_message_bytes_is_accepted() -> None:
    datagram = any_msg(value=b"x" * 50)
    h = Harness(max_message_bytes=len(datagram))
    h.send(datagram)
    assert discarded(h, reasons.TOO_LARGE) == 0
    assert h.ledger.buffered_messages == 1


def test_too_large_for_its_topic_is_counted_for_the_topic() -> None:
    small, large = any_msg(value=b"x" * 10), any_msg(value=b"x" * 11)
    h = Harness(topic_max_message_bytes=len(small))
    h.send(small)
    h.send(large)
    assert discarded(h, reasons.TOO_LARGE) == 1
    assert h.topic().stats.discarded == {reasons.TOO_LARGE: 1}
    assert h.ledger.buffered_messages == 1
    assert list(h.outcomes.recent_rejects) == []  # samples are for messages without a topic


@pytest.mark.parametrize("topic", [b"a/b", b"http://a/b/c", b"bad topic", b"\xff"])
def test_bad_topic_is_counted(topic: bytes) -> None:
    h = Harness()
    bad = to_any_topic(topic, lambda name: encode_any_partition(name, b"v"))
    h.send(bad)
    h.send(bad)  # the cached path
    assert discarded(h, reasons.BAD_TOPIC) == 2
    assert h.added == []
    assert len(h.registry) == 0


# -- rate limits --------------------------------------------------------------------------


def test_rate_limit_discards_beyond_the_budget() -> None:
    h = Harness(rate_budget=2)
    for _ in range(5):
        h.send(any_msg())
    assert h.ledger.buffered_messages == 2
    assert discarded(h, reasons.RATE_LIMITED) == 3
    assert h.topic().stats.discarded == {reasons.RATE_LIMITED: 3}
    assert h.topic().rate_budget == 0
    h.topic().rate_budget = 1  # a new interval (the rate limiter's refill)
    h.send(any_msg())
    h.send(any_msg())
    assert h.ledger.buffered_messages == 3
    assert discarded(h, reasons.RATE_LIMITED) == 4


def test_rate_limits_are_per_topic() -> None:
    h = Harness(rate_budget=1)
    for name in ("a", "b", "a", "b"):
        h.send(any_msg(name))
    assert h.ledger.buffered_messages == 2
    for name in ("a", "b"):
        topic = h.topic(f"persistent://public/default/{name}")
        assert topic.stats.discarded == {reasons.RATE_LIMITED: 1}


def test_buffer_full_does_not_use_up_the_rate_budget() -> None:
    h = Harness(buffer_max_bytes=3 * 31, rate_budget=5)
    for _ in range(5):
        h.send(any_msg(value=TEN))
    assert (h.ledger.buffered_messages, discarded(h, reasons.BUFFER_FULL)) == (3, 2)
    assert h.topic().rate_budget == 2  # only the 3 taken spent it


def test_spilled_messages_use_up_the_rate_budget(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, rate_budget=3, spool_dir=tmp_path)
    for _ in range(4):
        h.send(any_msg(value=TEN))
    assert (h.ledger.buffered_messages, h.ledger.spooled_messages) == (3, 2)
    assert discarded(h, reasons.RATE_LIMITED) == 1
    assert h.topic().rate_budget == 0


# -- one path, one order --------------------------------------------------------------------

SCENARIOS: dict[str, tuple[dict[str, Any], bytes]] = {
    # name: (harness options, the message)
    "too large": ({"max_message_bytes": 40}, any_msg(value=b"x" * 40)),
    "malformed": ({}, any_msg()[:-1]),
    "bad topic": ({}, bad_topic_datagram()),
    "too large for the topic": ({"topic_max_message_bytes": 40}, any_msg(value=b"x" * 40)),
    "rate limited": ({"rate_budget": 0}, any_msg()),
    "too large before rate limited": (
        {"topic_max_message_bytes": 40, "rate_budget": 0},
        any_msg(value=b"x" * 40),
    ),
    "rate limited before buffer full": ({"rate_budget": 0, "buffer_max_bytes": 10}, any_msg()),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_datagrams_and_stream_records_take_the_same_steps(scenario: str) -> None:
    options, message = SCENARIOS[scenario]
    as_datagram = Harness(**options)
    as_record = Harness(**options)
    as_datagram.send(message)
    tag = confirmation()
    assert as_record.offer(message, tag) is True
    assert as_record.counts() == as_datagram.counts()
    per_topic = [(t.name, t.stats.discarded) for t in as_datagram.registry]
    assert [(t.name, t.stats.discarded) for t in as_record.registry] == per_topic
    assert tag.outstanding == 0
    assert sum(tag.discarded.values()) == 1
    assert tag.discarded == {k: v for k, v in as_datagram.ledger.discarded.items() if v}


# -- buffer limits ---------------------------------------------------------------------------


def test_buffer_full_count_is_exact_with_producers() -> None:
    # Each message is charged 31 bytes: 31 * k + 31 <= 100 for k = 0..2 -> 3 accepted.
    h = Harness(buffer_max_bytes=100)
    h.send(any_msg(value=TEN))
    h.attach()
    for _ in range(9):
        h.send(any_msg(value=TEN))
    assert h.ledger.buffered_messages == 3
    assert discarded(h, reasons.BUFFER_FULL) == 7
    assert h.ledger.buffered_bytes == 3 * 31
    assert h.topic().stats.discarded == {reasons.BUFFER_FULL: 7}


def test_buffer_full_count_is_the_same_before_producers_exist() -> None:
    h = Harness(buffer_max_bytes=100)
    for _ in range(5):
        h.send(any_msg(value=TEN))
    assert h.ledger.buffered_messages == 3
    assert discarded(h, reasons.BUFFER_FULL) == 2
    assert h.ledger.buffered_bytes == 3 * 31
    h.attach()
    assert h.ledger.buffered_bytes == 3 * 31  # one charge, waiting or batched


def test_buffer_space_is_freed_by_acks() -> None:
    h = Harness(buffer_max_bytes=100)
    h.send(any_msg(value=TEN))
    h.attach()
    for _ in range(9):
        h.send(any_msg(value=TEN))
    assert h.ack_everything() == 3
    assert h.ledger.buffered_bytes == 0
    h.send(any_msg(value=TEN))
    assert h.ledger.buffered_messages == 1
    assert discarded(h, reasons.BUFFER_FULL) == 7


# -- topics ------------------------------------------------------------------------------------


def test_short_and_full_names_map_to_the_same_topic() -> None:
    h = Harness()
    h.send(any_msg("t"))
    h.send(any_msg(T))
    h.send(any_msg("public/default/t"))
    assert len(h.registry) == 1
    assert set(h.registry.by_bytes) == {b"t", T.encode(), b"public/default/t"}
    assert len({id(topic) for topic in h.registry.by_bytes.values()}) == 1
    assert len(h.added) == 1
    assert len(h.topic().unrouted) == 3


def test_topic_added_once_per_topic() -> None:
    h = Harness()
    for name in ("a", "b", "a", "b", "c"):
        h.send(any_msg(name))
    assert [t.name for t in h.added] == [
        "persistent://public/default/a",
        "persistent://public/default/b",
        "persistent://public/default/c",
    ]


# -- stream records --------------------------------------------------------------------------


def test_a_stream_record_is_outstanding_until_acked() -> None:
    settled: list[str] = []
    h = Harness()
    tag = Confirmation(lambda: settled.append("flush"))
    assert h.offer(any_msg(), tag)
    assert h.offer(any_msg(), tag)
    assert tag.outstanding == 2
    tag.request_id = 7  # the flush request arrives
    h.attach()
    assert settled == []
    assert h.ack_everything() == 2
    assert (tag.outstanding, tag.acked, tag.discarded) == (0, 2, {})
    assert settled == ["flush"]


def test_stream_records_and_datagrams_share_a_batch() -> None:
    h = Harness()
    first, second = confirmation(), confirmation()
    h.send(any_msg())
    (producer,) = h.attach()
    assert h.offer(any_msg(), first)
    h.send(any_msg())
    assert h.offer(any_msg(), first)
    assert h.offer(any_msg(), second)
    batch = producer.seal()
    assert batch is not None and batch.tags is not None
    assert [(run.tag, run.count) for run in batch.tags] == [
        (None, 1),
        (first, 1),
        (None, 1),
        (first, 1),
        (second, 1),
    ]
    producer.pending.popleft()
    h.outcomes.for_topic(h.topic()).batch_discarded(batch, reasons.BROKER_REJECTED)
    h.check()
    assert first.discarded == {reasons.BROKER_REJECTED: 2} and first.outstanding == 0
    assert second.discarded == {reasons.BROKER_REJECTED: 1} and second.outstanding == 0
    assert discarded(h, reasons.BROKER_REJECTED) == 5


def test_backpressure_counts_nothing_and_keeps_the_rate_budget() -> None:
    h = Harness(buffer_max_bytes=31, rate_budget=5)
    tag = confirmation()
    assert h.offer(any_msg(value=TEN), tag)
    assert not h.offer(any_msg(value=TEN), tag)  # offer() checks that nothing was counted
    assert (h.ledger.received, tag.outstanding, tag.discarded) == (1, 1, {})
    assert h.topic().rate_budget == 4
    h.attach()
    h.ack_everything()
    assert h.offer(any_msg(value=TEN), tag)  # offered again once there is room
    assert (h.ledger.received, tag.outstanding, tag.acked) == (2, 1, 1)


def test_stream_records_never_go_to_the_spool(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, spool_dir=tmp_path)
    h.send(any_msg(value=TEN))
    h.send(any_msg(value=TEN))  # no room: spilled, and the spool is in charge now
    assert h.policy.spilling
    assert not h.offer(any_msg(value=b"x"), confirmation())  # would fit, but must not overtake
    assert h.ledger.spooled_messages == 1


def test_waiting_stream_records_are_settled_when_given_up() -> None:
    h = Harness()
    tag = confirmation()
    assert h.offer(any_msg(), tag)
    h.send(any_msg())
    assert h.outcomes.discard_waiting(h.topic(), reasons.BROKER_REJECTED) == 2
    h.check()
    assert tag.discarded == {reasons.BROKER_REJECTED: 1} and tag.outstanding == 0
    assert h.topic().stats.discarded == {reasons.BROKER_REJECTED: 2}


# -- outcomes ---------------------------------------------------------------------------------


def test_acks_keep_the_identity() -> None:
    h = Harness()
    h.send(any_msg())
    h.attach()
    for _ in range(4):
        h.send(any_msg())
    assert h.ack_everything() == 5
    assert h.ledger.acked == 5
    assert h.ledger.buffered_messages == 0
    assert h.ledger.buffered_bytes == 0
    assert h.topic().stats.acked == 5
    assert h.ledger.batches_sent == 1


def test_a_discarded_batch_keeps_the_identity() -> None:
    h = Harness()
    h.send(any_msg())
    (producer,) = h.attach()
    h.send(any_msg())
    batch = producer.seal()
    assert isinstance(batch, SealedBatch)
    producer.pending.popleft()
    h.outcomes.for_topic(h.topic()).batch_discarded(batch, reasons.BROKER_REJECTED)
    h.check()
    assert discarded(h, reasons.BROKER_REJECTED) == 2
    assert h.ledger.buffered_messages == 0
    assert h.ledger.buffered_bytes == 0
    assert h.topic().stats.discarded == {reasons.BROKER_REJECTED: 2}


def test_discard_everything_keeps_the_identity() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg("a"))
    h.attach("persistent://public/default/a", partitions=2)
    for _ in range(5):
        h.send(any_msg("a"))  # 6 messages: batches sealed and one open
    h.send(any_msg("b"))
    h.send(any_msg("b"))  # waiting for producers
    h.send(b"junk")
    assert h.discard_everything() == 8
    assert discarded(h, reasons.SHUTDOWN) == 8
    assert discarded(h, reasons.MALFORMED) == 1
    assert h.ledger.buffered_messages == 0
    assert h.ledger.buffered_bytes == 0
    assert h.topic("persistent://public/default/b").unrouted == []


def test_discard_everything_after_partial_acks() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg())
    (producer,) = h.attach()
    for _ in range(4):
        h.send(any_msg())
    producer.on_registered("p", -1)
    producer.frames_to_send(0)
    _, batch = producer.on_receipt(producer.pending[0].sequence_id)
    assert batch is not None
    h.outcomes.for_topic(h.topic()).batch_acked(batch, 0.001)
    h.check()
    assert h.discard_everything() == 3
    # The second batch was written and never confirmed (the broker may have it): unconfirmed;
    # the open batch never went out: shutdown.
    assert (h.ledger.acked, discarded(h, reasons.UNCONFIRMED), discarded(h, reasons.SHUTDOWN)) == (
        2,
        2,
        1,
    )
