"""The intake: one admission path for datagrams and stream records, replay, shutdown.

Every test runs the real sans-IO parts (registry, appender, ledger, spool
policy with a real :class:`SpoolStore`, outcomes) behind a recording edge, and
checks after every step that the ledger's identity holds and that it agrees
with what memory really holds.
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import encode_key_field, entry_offsets
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import Ledger, memory_charge
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes, forget_buffered, spool_records_of
from pulsar_bruce.route.router import Topic
from pulsar_bruce.route.topics import TopicRegistry
from pulsar_bruce.spool import records
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.records import SpooledBatch
from pulsar_bruce.spool.spooler import Spooler
from pulsar_bruce.spool.store import SpoolStore
from to_pulsar.encoding import encode_any_partition, encode_partition_key

T = "persistent://public/default/t"


class RecordingEvents:
    """The appender's fake I/O edge: records every callback."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, PartitionProducer]] = []

    def batch_opened(self, producer: PartitionProducer) -> None:
        self.calls.append(("batch_opened", producer))

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self.calls.append(("batch_sealed", producer))

    def named(self, kind: str) -> list[PartitionProducer]:
        return [producer for name, producer in self.calls if name == kind]


class FlakyStore(SpoolStore):
    """A real store whose next appends can be made to fail like a full disk."""

    fail_next = 0

    def append(self, record: bytes, messages: int = 1) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise OSError(28, "No space left on device")
        super().append(record, messages)


class Harness:
    """The intake wired as the server wires it, with a recording edge and a fake clock."""

    def __init__(
        self,
        *,
        buffer_max_bytes: int = 1 << 20,
        max_message_bytes: int = 1 << 20,
        policy: BatchPolicy | None = None,
        spool_dir: Path | None = None,
        spool_max_bytes: int = 1 << 20,
        topic_max_message_bytes: int | None = None,
        rate_budget: int | None = None,
    ) -> None:
        self.ledger = Ledger()
        self.events = RecordingEvents()
        self.added: list[Topic] = []
        self.registry = TopicRegistry(self._topic_added)
        self.appender = Appender(self.events)
        self.store = (
            FlakyStore(spool_dir, spool_max_bytes, fsync="never") if spool_dir is not None else None
        )
        self.policy = SpoolPolicy(self.ledger, buffer_max_bytes, self.store, unreachable_after_s=10)
        self.outcomes = Outcomes(self.ledger)
        self.intake = Intake(
            self.registry,
            self.appender,
            self.ledger,
            self.policy,
            self.outcomes,
            max_message_bytes=max_message_bytes,
        )
        self.batch_policy = policy or BatchPolicy()
        self.topic_max_message_bytes = topic_max_message_bytes
        self.rate_budget = rate_budget
        self.reachable = True
        self.now = 0.0
        self.spooler: Spooler | None = None
        if self.store is not None:
            self.spooler = Spooler(
                self.store,
                self.policy,
                self.intake,
                broker_reachable=lambda: self.reachable,
                after_replay=lambda: None,
            )
            self.spooler.open()
        self._next_id = 1

    def _topic_added(self, topic: Topic) -> None:
        """What the topic manager does synchronously: apply the per-topic settings."""
        self.added.append(topic)
        if self.topic_max_message_bytes is not None:
            topic.max_message_bytes = self.topic_max_message_bytes
        topic.rate_budget = self.rate_budget

    # -- input ------------------------------------------------------------------------

    def send(self, datagram: bytes) -> None:
        assert self.intake.admit(datagram) is True  # a datagram is always counted
        self.check()

    def offer(self, record: bytes, confirmation: Confirmation) -> bool:
        """A stream record; returns whether the intake took it (False: offer it again)."""
        before, budgets = self.snapshot(), self.budgets()
        taken = self.intake.admit(record, confirmation)
        if not taken:  # counted nothing, spent no budget (its topic may be new, though)
            assert self.snapshot() == before
            assert {name: self.budgets()[name] for name in budgets} == budgets
        self.check()
        return taken

    def snapshot(self) -> tuple[object, ...]:
        ledger = self.ledger
        return (
            ledger.received,
            ledger.acked,
            dict(ledger.discarded),
            ledger.buffered_messages,
            ledger.buffered_bytes,
            ledger.spooled_messages,
        )

    def budgets(self) -> dict[str, int | None]:
        return {topic.name: topic.rate_budget for topic in self.registry}

    # -- checks -------------------------------------------------------------------------

    def in_memory(self) -> tuple[int, int]:
        """Messages and memory charge that the topics, batches and queues really hold."""
        messages = charge = 0
        for topic in self.registry:
            messages += topic.buffered_messages
            charge += sum(message.charge for message in topic.unrouted)
            charge += sum(batch.buffer_bytes for _, batch in topic.unrouted_batches)
            for producer in topic.producers:
                charge += producer.batch.charged
                charge += sum(batch.buffer_bytes for batch in producer.pending)
        return messages, charge

    def check(self) -> None:
        ledger = self.ledger
        assert ledger.identity_holds(), self.counts()
        assert min(ledger.buffered_messages, ledger.buffered_bytes, ledger.spooled_messages) >= 0
        messages, charge = self.in_memory()
        assert ledger.buffered_messages - ledger.spooled_messages == messages, self.counts()
        assert ledger.buffered_bytes == charge, self.counts()
        assert ledger.acked == sum(topic.stats.acked for topic in self.registry)

    def counts(self) -> dict[str, object]:
        ledger = self.ledger
        return {
            "received": ledger.received,
            "acked": ledger.acked,
            "discarded": {k: v for k, v in ledger.discarded.items() if v},
            "buffered": ledger.buffered_messages,
            "spooled": ledger.spooled_messages,
            "bytes": ledger.buffered_bytes,
            "in memory": self.in_memory(),
        }

    # -- the edge's part ----------------------------------------------------------------

    def topic(self, name: str = T) -> Topic:
        return self.registry.by_name[name]

    def attach(
        self, name: str = T, partitions: int = 0, ready: bool = True
    ) -> list[PartitionProducer]:
        """What TopicManager.grow does once the partition count is known."""
        topic = self.topic(name)
        producers = []
        for index in range(max(partitions, 1)):
            broker_name = f"{name}-partition-{index}" if partitions else name
            producer = PartitionProducer(broker_name, index, self._next_id, self.batch_policy)
            self._next_id += 1
            producer.ready = ready
            producers.append(producer)
        topic.partitioned = partitions > 0
        topic.producers.extend(producers)
        self.appender.route_waiting(topic)
        self.check()
        return producers

    def ack_everything(self, name: str = T) -> int:
        """Seal, send and receipt every batch of a topic through the real producer API."""
        topic = self.topic(name)
        delivery = self.outcomes.for_topic(topic)
        acked = 0
        for producer in topic.producers:
            producer.seal()
            if not producer.ready or producer.name is None:
                producer.on_registered("p", -1)
            out = producer.frames_to_send(0)
            assert not out.rejected
            delivery.batches_sent(out.batches, out.resent_messages)
            while producer.pending:
                _, batch = producer.on_receipt(producer.pending[0].sequence_id)
                assert batch is not None
                delivery.batch_acked(batch, 0.001)
                acked += batch.count
                self.check()
        return acked

    def discard_everything(self, reason: str = reasons.SHUTDOWN) -> int:
        total = self.outcomes.discard_everything(list(self.registry), reason)
        self.check()
        return total

    def tick(self, seconds: float = 0.0) -> None:
        """One spooler tick at the fake clock: write what is held, watch brokers, replay."""
        assert self.spooler is not None
        self.now += seconds
        self.spooler.tick(self.now)
        self.check()

    def replay_all(self) -> None:
        """Tick, attach and ack until the spool is drained and memory is empty."""
        for _ in range(1000):
            self.tick()
            for topic in list(self.registry):
                if not topic.producers:
                    self.attach(topic.name)
                self.ack_everything(topic.name)
            if not self.policy.spilling and self.ledger.buffered_messages == 0:
                return
        raise AssertionError(f"the spool does not drain: {self.counts()}")

    def shutdown_to_spool(self) -> bool:
        """What the server does at shutdown with a spool (the part after the receipt wait)."""
        assert self.spooler is not None
        topics = list(self.registry)
        front, count, charge = spool_records_of(topics)
        kept = self.spooler.shutdown(front)
        if kept:
            forget_buffered(topics)
            self.ledger.to_disk(count, charge)
        self.check()
        self.discard_everything()
        return kept


def any_msg(topic: str = "t", value: bytes = b"v", key: bytes = b"", ts: int = 0) -> bytes:
    return encode_any_partition(topic, value, key, ts)


def bad_topic_datagram() -> bytes:
    """An AnyPartition datagram to ``bad topic`` (the encoder refuses the name, so it is
    patched in; the conftest's switch works only inside tests, not at collection)."""
    return encode_any_partition(b"bad-topic", b"v").replace(b"bad-topic", b"bad topic")


def keyed_msg(pkey: int, topic: str = "t", value: bytes = b"v") -> bytes:
    return encode_partition_key(pkey, topic, value)


def charge_of(value: bytes, key: bytes = b"") -> int:
    return memory_charge(encode_key_field(key), len(value))


def discarded(h: Harness, reason: str) -> int:
    return h.ledger.discarded.get(reason, 0)


def confirmation() -> Confirmation:
    return Confirmation(lambda: None)


def split_values(payload: bytes) -> list[bytes]:
    """The values of a batch payload's entries ``[u32 size][metadata][value]``."""
    offsets = [*entry_offsets(payload), len(payload)]
    values = []
    for start, end in itertools.pairwise(offsets):
        (metadata_size,) = struct.unpack_from(">I", payload, start)
        values.append(payload[start + 4 + metadata_size : end])
    return values


def batch_entries(*datagrams: bytes) -> bytes:
    """The entries of a batch of ``datagrams`` (as a spool record holds them)."""
    h = Harness()
    for datagram in datagrams:
        h.send(datagram)
    (producer,) = h.attach()
    sealed = producer.seal()
    assert sealed is not None
    return sealed.payload


TEN = b"0123456789"  # a 10-byte value, no key: charged 10 + 21 = 31 bytes


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
    assert h.events.calls == []
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
    h.send(encode_any_partition(topic, b"v"))
    h.send(encode_any_partition(topic, b"v"))  # the cached path
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


# -- waiting for producers ----------------------------------------------------------------------


def test_messages_wait_unrouted_until_producers_exist() -> None:
    h = Harness()
    h.send(any_msg(value=b"first"))
    h.send(keyed_msg(6, value=b"second"))
    topic = h.topic()
    assert len(topic.unrouted) == 2
    assert h.ledger.buffered_messages == 2
    assert h.events.named("batch_opened") == []
    producers = h.attach(partitions=4)
    assert topic.unrouted == []
    assert topic.partitioned
    assert h.ledger.buffered_messages == 2
    assert producers[2].batch.count == 1  # 6 % 4
    assert sum(p.batch.count for p in producers) == 2


def test_unrouted_messages_are_routed_in_arrival_order() -> None:
    h = Harness()
    for i in range(5):
        h.send(any_msg(value=f"m{i}".encode()))
    (producer,) = h.attach()
    assert producer.batch.count == 5
    sealed = producer.seal()
    assert sealed is not None
    assert split_values(sealed.payload) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_non_partitioned_topic_takes_every_message() -> None:
    h = Harness()
    h.send(any_msg())
    (producer,) = h.attach()
    assert not h.topic().partitioned
    for pkey in (0, 1, 99):
        h.send(keyed_msg(pkey))
    h.send(any_msg())
    assert producer.batch.count == 5


def test_keyed_messages_route_by_key_modulo() -> None:
    h = Harness()
    h.send(any_msg())
    producers = h.attach(partitions=4)
    producers[0].seal()
    for pkey in (1, 5, 2, 3, 7, -1):
        h.send(keyed_msg(pkey))
    assert [p.batch.count for p in producers] == [0, 2, 1, 3]


def test_message_content_reaches_the_batch() -> None:
    h = Harness()
    h.send(any_msg(value=b"payload", key=b"k", ts=1234))
    (producer,) = h.attach()
    sealed = producer.seal()
    assert sealed is not None
    assert split_values(sealed.payload) == [b"payload"]
    assert sealed.buffer_bytes == charge_of(b"payload", b"k")


# -- batching events ----------------------------------------------------------------------------


def test_batch_opened_once_per_batch() -> None:
    h = Harness(policy=BatchPolicy(max_messages=3))
    h.send(any_msg())
    (producer,) = h.attach()
    for _ in range(8):
        h.send(any_msg())
    # 9 messages in batches of 3: three batches opened and sealed.
    assert h.events.named("batch_opened") == [producer] * 3
    assert h.events.named("batch_sealed") == [producer] * 3
    assert len(producer.pending) == 3
    assert producer.batch.count == 0


def test_batch_sealed_at_max_messages() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg())
    (producer,) = h.attach()
    assert h.events.named("batch_sealed") == []
    h.send(any_msg())
    assert h.events.named("batch_sealed") == [producer]
    assert [b.count for b in producer.pending] == [2]


def test_batches_are_sealed_at_max_bytes_and_never_exceed_it() -> None:
    # Each message is charged 31 bytes: with max_bytes 70 a batch of 2 (62) is sealed when the
    # third arrives (62 + 31 > 70).
    h = Harness(policy=BatchPolicy(max_bytes=70))
    h.send(any_msg(value=TEN))
    (producer,) = h.attach()
    for _ in range(5):
        h.send(any_msg(value=TEN))
    assert [b.count for b in producer.pending] == [2, 2]
    assert producer.batch.count == 2
    assert all(len(b.payload) <= b.buffer_bytes <= 70 for b in producer.pending)
    assert h.events.named("batch_sealed") == [producer, producer]
    assert h.events.named("batch_opened") == [producer] * 3


def test_batch_sealed_before_a_message_that_would_overflow_it() -> None:
    h = Harness(policy=BatchPolicy(max_bytes=40))  # 31 + 31 > 40: seal first, then append
    h.send(any_msg(value=TEN))
    (producer,) = h.attach()
    h.send(any_msg(value=TEN))
    assert [b.count for b in producer.pending] == [1]
    assert producer.batch.count == 1
    assert h.events.named("batch_opened") == [producer, producer]
    assert h.events.named("batch_sealed") == [producer]


def test_a_message_larger_than_max_bytes_is_a_batch_of_its_own() -> None:
    h = Harness(policy=BatchPolicy(max_bytes=64))
    h.send(any_msg(value=b"small"))
    (producer,) = h.attach()
    h.send(any_msg(value=b"x" * 200))
    assert [b.count for b in producer.pending] == [1, 1]
    assert producer.batch.count == 0


def test_any_partition_spreads_batches_round_robin() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg())
    producers = h.attach(partitions=3)
    for _ in range(11):
        h.send(any_msg())
    assert [len(p.pending) for p in producers] == [2, 2, 2]


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
    assert (h.ledger.acked, discarded(h, reasons.SHUTDOWN)) == (2, 3)


# -- the spool -----------------------------------------------------------------------------------


def test_overflow_spills_in_order_and_replays_with_the_identity_intact(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=300, spool_dir=tmp_path)
    assert h.store is not None
    h.send(any_msg(value=b"a" * 200))
    (producer,) = h.attach()
    h.send(any_msg(value=b"b" * 100))  # no room: to the spool, and the spool stays in charge
    h.send(any_msg(value=b"c"))  # would fit, but must queue behind "b"
    assert h.ledger.spooled_messages == 2 and h.policy.spilling
    assert h.store.is_empty  # held: written once per drain, not per message
    h.policy.write_held()
    h.check()
    assert not h.store.is_empty
    h.ack_everything()
    h.tick()  # replays "b" (this run's: already received), up to half the memory cap
    assert h.ledger.spooled_messages == 1
    h.tick()  # and then "c"
    assert h.ledger.spooled_messages == 0 and h.ledger.received == 3
    assert producer.batch.count == 2
    sealed = producer.seal()
    assert sealed is not None
    assert split_values(sealed.payload) == [b"b" * 100, b"c"]
    h.tick()
    assert not h.policy.spilling  # drained: memory again
    h.send(any_msg(value=b"d"))
    assert h.ledger.spooled_messages == 0 and producer.batch.count == 1


def test_a_full_spool_means_buffer_full(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=150, spool_dir=tmp_path, spool_max_bytes=10)
    h.send(any_msg(value=b"a" * 100))
    h.send(any_msg(value=b"b" * 100))
    assert discarded(h, reasons.BUFFER_FULL) == 1
    assert h.topic().stats.discarded == {reasons.BUFFER_FULL: 1}
    assert not h.policy.spilling


def test_a_failed_spool_write_discards_the_held_messages(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, spool_dir=tmp_path)
    assert isinstance(h.store, FlakyStore)
    for _ in range(4):
        h.send(any_msg(value=TEN))
    h.store.fail_next = 1
    h.policy.write_held()
    h.check()
    assert discarded(h, reasons.BUFFER_FULL) == 3
    assert (h.ledger.received, h.ledger.buffered_messages, h.ledger.spooled_messages) == (4, 1, 0)


def test_previous_run_datagrams_count_as_received_when_replayed() -> None:
    h = Harness()
    h.intake.replay_datagram(any_msg(), previous_run=True)
    h.check()
    assert h.ledger.received == 1 and h.ledger.buffered_messages == 1


def test_replayed_messages_are_not_rate_limited_again(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, rate_budget=2, spool_dir=tmp_path)
    h.send(any_msg(value=TEN))
    h.send(any_msg(value=TEN))  # spilled, spending the rest of the budget
    assert h.topic().rate_budget == 0
    h.attach()
    h.ack_everything()
    h.tick()  # this run's datagram comes back
    h.intake.replay_datagram(any_msg(value=TEN), previous_run=True)
    h.check()
    assert discarded(h, reasons.RATE_LIMITED) == 0
    assert (h.ledger.received, h.ledger.buffered_messages, h.ledger.spooled_messages) == (3, 2, 0)


def test_a_replayed_datagram_over_its_topics_new_limit_is_too_large(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=31, spool_dir=tmp_path)
    h.send(any_msg(value=TEN))
    h.send(any_msg(value=b"x" * 30))  # spilled
    h.topic().max_message_bytes = 40  # lowered by a reload meanwhile
    h.tick()  # writes it
    h.attach()
    h.ack_everything()
    h.tick()  # replays it
    assert discarded(h, reasons.TOO_LARGE) == 1
    assert h.topic().stats.discarded == {reasons.TOO_LARGE: 1}
    assert (h.ledger.received, h.ledger.buffered_messages, h.ledger.spooled_messages) == (2, 0, 0)


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [(b"junk", reasons.MALFORMED), (bad_topic_datagram(), reasons.BAD_TOPIC)],
    ids=["malformed", "bad_topic"],
)
def test_a_bad_previous_run_datagram_is_discarded_when_replayed(
    datagram: bytes, reason: str
) -> None:
    h = Harness()
    h.intake.replay_datagram(datagram, previous_run=True)
    h.check()
    assert (h.ledger.received, discarded(h, reason)) == (1, 1)


def test_replayed_batches_wait_for_producers_then_go_to_their_partition() -> None:
    h = Harness()
    h.intake.replay_batch(SpooledBatch(T, 1, -1, 2, batch_entries(any_msg(), any_msg())))
    h.check()
    assert h.ledger.received == 2 and h.ledger.possible_duplicates == 0
    assert len(h.topic().unrouted_batches) == 1 and h.events.calls == []
    producers = h.attach(partitions=2)
    assert [len(p.pending) for p in producers] == [0, 1]
    assert h.events.named("batch_sealed") == [producers[1]]
    assert h.ack_everything() == 2
    assert h.ledger.buffered_bytes == 0


def test_a_replayed_batch_for_a_partition_gone_goes_to_any_partition() -> None:
    h = Harness()
    h.send(any_msg())
    (producer,) = h.attach(partitions=1)
    h.intake.replay_batch(SpooledBatch(T, 5, 10, 1, batch_entries(any_msg())))
    h.check()
    assert len(producer.pending) == 1
    assert h.ledger.possible_duplicates == 1  # it had been sent: the broker may have it


def test_a_replayed_batch_with_a_bad_topic_is_discarded() -> None:
    h = Harness()
    h.intake.replay_batch(SpooledBatch("bad topic", 0, -1, 3, b"entries"))
    h.check()
    assert (h.ledger.received, discarded(h, reasons.BAD_TOPIC)) == (3, 3)
    assert h.ledger.buffered_bytes == 0


# -- shutdown with a spool, and the next start ------------------------------------------------


def test_shutdown_keeps_everything_in_the_spool_for_the_next_start(tmp_path: Path) -> None:
    h = Harness(buffer_max_bytes=4 * 31, spool_dir=tmp_path, policy=BatchPolicy(max_messages=2))
    h.send(any_msg(value=b"first"))
    (producer,) = h.attach()
    for value in (b"second", b"third"):
        h.send(any_msg(value=value))
    producer.on_registered("p", -1)
    producer.frames_to_send(0)  # the first batch is framed and in flight
    h.send(any_msg("w", value=b"waiting"))  # its topic has no producers yet
    h.send(any_msg(value=b"spilled"))  # no room: to the spool
    assert h.ledger.spooled_messages == 1
    assert h.shutdown_to_spool()
    assert h.ledger.buffered_messages == h.ledger.spooled_messages == 5
    assert h.ledger.buffered_bytes == 0
    assert discarded(h, reasons.SHUTDOWN) == 0

    again = Harness(buffer_max_bytes=4 * 31, spool_dir=tmp_path)
    assert again.policy.spilling
    again.replay_all()
    assert again.ledger.received == again.ledger.acked == 5
    assert again.ledger.possible_duplicates == 2  # the batch that had been sent
    assert again.ledger.buffered_bytes == 0
    assert again.store is not None and again.store.is_empty


def test_spool_records_of_describes_what_memory_holds() -> None:
    h = Harness(policy=BatchPolicy(max_messages=2))
    h.send(any_msg(value=b"a"))
    (producer,) = h.attach()
    h.send(any_msg(value=b"b"))
    h.send(any_msg(value=b"c"))
    h.send(any_msg("w", value=b"w"))
    front, count, charge = spool_records_of(list(h.registry))
    assert (count, charge) == (h.ledger.buffered_messages, h.ledger.buffered_bytes)
    assert (count, charge) == (4, 4 * charge_of(b"a"))
    found = list(records.iter_records(b"".join(front)))
    kinds = [kind for kind, _ in found]
    assert kinds == [records.BATCH, records.BATCH, records.DATAGRAM]
    batches = [records.decode_batch(body) for kind, body in found if kind == records.BATCH]
    assert [(b.topic, b.count) for b in batches] == [(T, 2), (T, 1)]
    assert split_values(batches[0].entries) == [b"a", b"b"]
    assert found[2][1] == any_msg("w", value=b"w")
    assert producer.batch.count == 0  # sealed, still in memory until forget_buffered
    forget_buffered(list(h.registry))
    assert h.in_memory() == (0, 0)


# -- the identity under any sequence ------------------------------------------------------------

datagrams = st.one_of(
    st.builds(
        any_msg, st.sampled_from(["a", "b", T]), st.binary(max_size=64), st.binary(max_size=8)
    ),
    st.builds(
        keyed_msg, st.integers(0, 2**32 - 1), st.sampled_from(["a", "b"]), st.binary(max_size=64)
    ),
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from(
            [
                bad_topic_datagram(),
                any_msg(value=b"x" * 300),  # too large
                any_msg("b", value=b"x" * 150),  # too large for topic b, once it is lowered
            ]
        ),
    ),
)
bursts = st.lists(datagrams, min_size=1, max_size=8)
PARTITIONS = {"a": 0, "b": 2, "t": 3}
SETTINGS: dict[str, Any] = {
    "buffer_max_bytes": 200,
    "max_message_bytes": 256,
    "policy": BatchPolicy(max_messages=3, max_bytes=200),
    "spool_max_bytes": 800,
    "rate_budget": 6,
}
BIG_MEMORY = {"buffer_max_bytes": 1 << 20}


class IntakeMachine(RuleBasedStateMachine):
    """Any sequence of input and edge events; the ledger is checked after every step.

    A restart ends the run the way the server does (what memory holds goes to
    the spool) and starts the next one on the same spool directory: it must
    receive exactly what the last one kept.
    """

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        self.start(Harness(spool_dir=Path(self.directory.name), **SETTINGS))

    def start(self, harness: Harness) -> None:
        self.h = harness
        self.confirmations = [confirmation()]
        self.taken: dict[int, int] = {}  # id(confirmation) -> records the intake took
        self.counted = harness.ledger.received
        self.received = self.counted

    # -- input ---------------------------------------------------------------------------

    @rule(burst=bursts)
    def datagrams(self, burst: list[bytes]) -> None:
        for datagram in burst:
            self.h.send(datagram)
            self.counted += 1

    @rule(burst=bursts)
    def stream_records(self, burst: list[bytes]) -> None:
        tag = self.confirmations[-1]
        for record in burst:
            if self.h.offer(record, tag):
                self.counted += 1
                self.taken[id(tag)] = self.taken.get(id(tag), 0) + 1

    @rule()
    def flush_request(self) -> None:
        self.confirmations[-1].request_id = len(self.confirmations)
        self.confirmations.append(confirmation())

    # -- the edge ------------------------------------------------------------------------

    @rule()
    def producers_attach(self) -> None:
        for topic in list(self.h.registry):
            if not topic.producers:
                self.h.attach(topic.name, partitions=PARTITIONS[topic.name[-1]])

    @rule()
    def broker_acks(self) -> None:
        for topic in list(self.h.registry):
            if topic.producers:
                self.h.ack_everything(topic.name)

    @rule()
    def broker_rejects(self) -> None:
        """The newest batch of every producer is given up."""
        for topic in self.h.registry:
            delivery = self.h.outcomes.for_topic(topic)
            for producer in topic.producers:
                batch = producer.seal() or (producer.pending[-1] if producer.pending else None)
                if batch is not None:
                    producer.pending.remove(batch)
                    producer.in_flight = min(producer.in_flight, len(producer.pending))
                    delivery.batch_discarded(batch, reasons.BROKER_REJECTED)
                    self.h.check()

    @rule()
    def discard_everything(self) -> None:
        self.h.discard_everything()

    @rule()
    def socket_drained(self) -> None:
        self.h.policy.write_held()

    @rule()
    def disk_fails(self) -> None:
        assert isinstance(self.h.store, FlakyStore)
        self.h.store.fail_next = 1

    @rule(reachable=st.booleans(), seconds=st.sampled_from([1.0, 11.0]))
    def spooler_tick(self, reachable: bool, seconds: float) -> None:
        self.h.reachable = reachable  # unreachable for 10 s with messages in memory: spill
        self.h.tick(seconds)

    @rule()
    def broker_outage(self) -> None:
        """No broker for 22 s: past unreachable_after_s, new messages go to the spool."""
        self.h.reachable = False
        self.h.tick(11.0)
        self.h.tick(11.0)

    @rule()
    def rate_refill(self) -> None:
        for topic in self.h.registry:
            topic.rate_budget = SETTINGS["rate_budget"]

    @rule()
    def reload_lowers_the_limit_of_b(self) -> None:
        for topic in self.h.registry:
            if topic.name.endswith("/b"):
                topic.max_message_bytes = 120

    @rule()
    def restart(self) -> None:
        self.h.reachable = True
        self.h.shutdown_to_spool()
        assert self.h.ledger.buffered_messages == self.h.ledger.spooled_messages
        assert self.h.ledger.buffered_bytes == 0
        kept = self.h.ledger.spooled_messages
        # Memory large enough to replay the front segment in one read: a front read in
        # parts loses the head segment's cursor (see test_spool_policy.py, xfail).
        again = Harness(spool_dir=Path(self.directory.name), **{**SETTINGS, **BIG_MEMORY})
        again.replay_all()
        again.policy.buffer_max_bytes = SETTINGS["buffer_max_bytes"]
        assert again.ledger.received == kept  # counted once, by the run that replays it
        assert again.ledger.acked + again.ledger.discarded_total == kept
        self.start(again)

    # -- after every step ------------------------------------------------------------------

    @invariant()
    def identity(self) -> None:
        self.h.check()
        assert self.h.ledger.received >= self.received  # nothing is ever un-counted
        assert self.h.ledger.received == self.counted
        self.received = self.h.ledger.received

    def teardown(self) -> None:
        try:
            self.h.discard_everything()
            self.h.policy.write_held()
            self.h.check()
            for tag in self.confirmations:  # each record taken has its outcome
                assert tag.outstanding == 0
                assert tag.acked + sum(tag.discarded.values()) == self.taken.get(id(tag), 0)
        finally:
            self.directory.cleanup()


TestIdentityHoldsAfterEveryStep = IntakeMachine.TestCase
TestIdentityHoldsAfterEveryStep.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, derandomize=True
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(datagrams, max_size=60))
def test_buffered_bytes_return_to_zero_once_everything_is_acked(batch: list[bytes]) -> None:
    h = Harness(buffer_max_bytes=2000, max_message_bytes=256, policy=BatchPolicy(max_messages=4))
    for datagram in batch:
        h.send(datagram)
    for topic in list(h.registry):
        h.attach(topic.name, partitions=2)
        h.ack_everything(topic.name)
    assert h.ledger.buffered_messages == 0
    assert h.ledger.buffered_bytes == 0
