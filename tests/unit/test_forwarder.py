"""Forwarder: the per-datagram path, batching events and the accounting identity."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import SealedBatch
from pulsar_bruce.metrics.stats import Stats
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.forwarder import Forwarder
from pulsar_bruce.route.router import Topic
from to_pulsar.encoding import encode_any_partition, encode_partition_key

T = "persistent://public/default/t"


class RecordingEvents:
    """A fake I/O edge that records every callback."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def topic_added(self, topic: Topic) -> None:
        self.calls.append(("topic_added", topic))

    def batch_opened(self, producer: PartitionProducer) -> None:
        self.calls.append(("batch_opened", producer))

    def batch_sealed(self, producer: PartitionProducer) -> None:
        self.calls.append(("batch_sealed", producer))

    def named(self, kind: str) -> list[object]:
        return [arg for name, arg in self.calls if name == kind]


class Harness:
    """A forwarder with a recording edge; checks the identity after every step."""

    def __init__(
        self,
        *,
        buffer_max_bytes: int = 1 << 20,
        max_message_bytes: int = 1 << 20,
        policy: BatchPolicy | None = None,
    ) -> None:
        self.stats = Stats()
        self.events = RecordingEvents()
        self.forwarder = Forwarder(
            self.stats,
            self.events,
            buffer_max_bytes=buffer_max_bytes,
            max_message_bytes=max_message_bytes,
        )
        self.policy = policy or BatchPolicy()
        self._next_id = 1

    def send(self, datagram: bytes) -> None:
        self.forwarder.handle_datagram(datagram)
        self.check()

    def check(self) -> None:
        assert self.stats.identity_holds(), self.counts()
        assert self.stats.buffered_messages >= 0
        assert self.stats.buffered_bytes >= 0

    def counts(self) -> dict[str, object]:
        s = self.stats
        return {
            "received": s.received,
            "acked": s.acked,
            "discarded": {k: v for k, v in s.discarded.items() if v},
            "buffered": s.buffered_messages,
        }

    def topic(self, name: str = T) -> Topic:
        return self.forwarder.topics_by_name[name]

    def attach(
        self, name: str = T, partitions: int = 0, ready: bool = True
    ) -> list[PartitionProducer]:
        topic = self.topic(name)
        count = max(partitions, 1)
        producers = []
        for index in range(count):
            broker_name = f"{name}-partition-{index}" if partitions else name
            producer = PartitionProducer(broker_name, index, self._next_id, self.policy)
            self._next_id += 1
            producer.ready = ready
            producers.append(producer)
        self.forwarder.add_producers(topic, producers, partitioned=partitions > 0)
        self.check()
        return producers

    def ack_everything(self, name: str = T) -> int:
        """Seal, send and receipt every batch of a topic through the real producer API."""
        topic = self.topic(name)
        acked = 0
        for producer in topic.producers:
            producer.seal()
            if not producer.ready or producer.name is None:
                producer.on_registered("p", -1)
            out = producer.frames_to_send(0)
            assert not out.rejected
            while producer.pending:
                _, batch = producer.on_receipt(producer.pending[0].sequence_id)
                assert batch is not None
                self.forwarder.on_acked(topic, batch)
                acked += batch.count
                self.check()
        return acked


def any_msg(topic: str = "t", value: bytes = b"v", key: bytes = b"", ts: int = 0) -> bytes:
    return encode_any_partition(topic, value, key, ts)


def keyed_msg(pkey: int, topic: str = "t", value: bytes = b"v") -> bytes:
    return encode_partition_key(pkey, topic, value)


def discarded(h: Harness, reason: str) -> int:
    return h.stats.discarded.get(reason, 0)


# -- discards -------------------------------------------------------------------------------


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
    assert h.stats.received == 1
    assert h.stats.buffered_messages == 0
    assert h.events.calls == []


def test_every_parser_reason_is_a_known_reason() -> None:
    h = Harness()
    for datagram in (b"", b"\xff" * 20, struct.pack(">ihh", 8, 256, 7)):
        h.send(datagram)
    assert sum(h.stats.discarded.get(r, 0) for r in reasons.ALL) == 3


def test_too_large_is_counted() -> None:
    h = Harness(max_message_bytes=100)
    h.send(any_msg(value=b"x" * 100))
    assert discarded(h, reasons.TOO_LARGE) == 1
    assert h.forwarder.topics == {}  # never even parsed


def test_exactly_max_message_bytes_is_accepted() -> None:
    datagram = any_msg(value=b"x" * 50)
    h = Harness(max_message_bytes=len(datagram))
    h.send(datagram)
    assert discarded(h, reasons.TOO_LARGE) == 0
    assert h.stats.buffered_messages == 1


@pytest.mark.parametrize("topic", [b"a/b", b"http://a/b/c", b"bad topic", b"\xff"])
def test_bad_topic_is_counted(topic: bytes) -> None:
    h = Harness()
    h.send(encode_any_partition(topic, b"v"))
    h.send(encode_any_partition(topic, b"v"))  # the cached path
    assert discarded(h, reasons.BAD_TOPIC) == 2
    assert h.events.named("topic_added") == []
    assert h.forwarder.topics_by_name == {}


def test_buffer_full_count_is_exact_with_producers() -> None:
    # 10-byte value, no key, no timestamp: entry_size = 4 + 1 + 5 + 11 + 10 = 31 (the bound
    # checked), while an entry really takes 4 + 2 + 10 = 16 bytes of the batch.  With 100
    # bytes: accepted while 16 * k + 31 <= 100, i.e. k = 0..4 -> 5 accepted, the rest full.
    h = Harness(buffer_max_bytes=100)
    h.send(any_msg(value=b"0123456789"))
    h.attach()
    for _ in range(9):
        h.send(any_msg(value=b"0123456789"))
    assert h.stats.buffered_messages == 5
    assert discarded(h, reasons.BUFFER_FULL) == 5
    assert h.stats.buffered_bytes == 5 * 16
    assert h.topic().stats.discarded == {reasons.BUFFER_FULL: 5}


def test_buffer_full_count_is_exact_before_producers_exist() -> None:
    # Waiting messages are charged the bound (31 bytes): 31 * k + 31 <= 100 -> 3 accepted.
    h = Harness(buffer_max_bytes=100)
    for _ in range(5):
        h.send(any_msg(value=b"0123456789"))
    assert h.stats.buffered_messages == 3
    assert discarded(h, reasons.BUFFER_FULL) == 2
    assert h.stats.buffered_bytes == 3 * 31
    h.attach()
    assert h.stats.buffered_bytes == 3 * 16  # re-charged at their real size once batched


def test_buffer_space_is_freed_by_acks() -> None:
    h = Harness(buffer_max_bytes=100)
    h.send(any_msg(value=b"0123456789"))
    h.attach()
    for _ in range(9):
        h.send(any_msg(value=b"0123456789"))
    assert h.ack_everything() == 5
    assert h.stats.buffered_bytes == 0
    h.send(any_msg(value=b"0123456789"))
    assert h.stats.buffered_messages == 1
    assert discarded(h, reasons.BUFFER_FULL) == 5


# -- topics ------------------------------------------------------------------------------------


def test_short_and_full_names_map_to_the_same_topic() -> None:
    h = Harness()
    h.send(any_msg("t"))
    h.send(any_msg(T))
    h.send(any_msg("public/default/t"))
    assert len(h.forwarder.topics_by_name) == 1
    assert set(h.forwarder.topics) == {b"t", T.encode(), b"public/default/t"}
    assert len({id(topic) for topic in h.forwarder.topics.values()}) == 1
    assert len(h.events.named("topic_added")) == 1
    assert len(h.topic().unrouted) == 3


def test_topic_added_once_per_topic() -> None:
    h = Harness()
    for name in ("a", "b", "a", "b", "c"):
        h.send(any_msg(name))
    added = h.events.named("topic_added")
    assert [t.name for t in added] == [  # type: ignore[attr-defined]
        "persistent://public/default/a",
        "persistent://public/default/b",
        "persistent://public/default/c",
    ]


# -- waiting for producers --------------------------------------------------------------------


def test_messages_wait_unrouted_until_producers_exist() -> None:
    h = Harness()
    h.send(any_msg(value=b"first"))
    h.send(keyed_msg(6, value=b"second"))
    topic = h.topic()
    assert len(topic.unrouted) == 2
    assert h.stats.buffered_messages == 2
    assert h.events.named("batch_opened") == []
    producers = h.attach(partitions=4)
    assert topic.unrouted == []
    assert topic.partitioned
    assert h.stats.buffered_messages == 2
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
    assert [m[-2:] for m in split_values(sealed.payload)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def split_values(payload: bytes) -> list[bytes]:
    from pulsar_bruce.frame import pulsar_api_pb2 as pb

    values = []
    offset = 0
    while offset < len(payload):
        (size,) = struct.unpack_from(">I", payload, offset)
        md = pb.SingleMessageMetadata()
        md.ParseFromString(payload[offset + 4 : offset + 4 + size])
        offset += 4 + size
        values.append(payload[offset : offset + md.payload_size])
        offset += md.payload_size
    return values


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


# -- batching events --------------------------------------------------------------------------


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
    # Entries take 16 bytes, the bound checked is 31: with max_bytes 50 a batch holding
    # 2 entries (32 bytes) is sealed when the third arrives (32 + 31 > 50).
    h = Harness(policy=BatchPolicy(max_bytes=50))
    h.send(any_msg(value=b"0123456789"))
    (producer,) = h.attach()
    for _ in range(5):
        h.send(any_msg(value=b"0123456789"))
    assert [b.count for b in producer.pending] == [2, 2]
    assert producer.batch.count == 2
    assert all(len(b.payload) <= 50 for b in producer.pending)
    assert h.events.named("batch_sealed") == [producer, producer]
    assert h.events.named("batch_opened") == [producer] * 3


def test_batch_sealed_before_a_message_that_would_overflow_it() -> None:
    # 16 real bytes in the batch + a 31-byte bound > 40: seal first, then append.
    h = Harness(policy=BatchPolicy(max_bytes=40))
    h.send(any_msg(value=b"0123456789"))
    (producer,) = h.attach()
    h.send(any_msg(value=b"0123456789"))
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


# -- outcomes ---------------------------------------------------------------------------------


def test_on_acked_keeps_the_identity() -> None:
    h = Harness()
    h.send(any_msg())
    h.attach()
    for _ in range(4):
        h.send(any_msg())
    assert h.ack_everything() == 5
    assert h.stats.acked == 5
    assert h.stats.buffered_messages == 0
    assert h.stats.buffered_bytes == 0
    assert h.topic().stats.acked == 5


def test_discard_batch_keeps_the_identity() -> None:
    h = Harness()
    h.send(any_msg())
    (producer,) = h.attach()
    h.send(any_msg())
    batch = producer.seal()
    assert isinstance(batch, SealedBatch)
    producer.pending.popleft()
    h.forwarder.discard_batch(h.topic(), batch, reasons.BROKER_REJECTED)
    h.check()
    assert discarded(h, reasons.BROKER_REJECTED) == 2
    assert h.stats.buffered_messages == 0
    assert h.stats.buffered_bytes == 0
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
    total = h.forwarder.discard_everything(reasons.SHUTDOWN)
    h.check()
    assert total == 8
    assert discarded(h, reasons.SHUTDOWN) == 8
    assert discarded(h, reasons.MALFORMED) == 1
    assert h.stats.buffered_messages == 0
    assert h.stats.buffered_bytes == 0
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
    h.forwarder.on_acked(h.topic(), batch)
    h.check()
    assert h.forwarder.discard_everything(reasons.SHUTDOWN) == 3
    h.check()
    assert (h.stats.acked, discarded(h, reasons.SHUTDOWN)) == (2, 3)


def test_seal_all_seals_every_open_batch() -> None:
    h = Harness()
    h.send(any_msg())
    producers = h.attach(partitions=2)
    h.send(keyed_msg(1))
    sealed: list[PartitionProducer] = []
    h.forwarder.seal_all(sealed.append)
    assert sealed == producers
    assert all(p.batch.count == 0 for p in producers)
    h.check()


# -- the identity under any sequence ------------------------------------------------------------

datagrams = st.one_of(
    st.builds(
        any_msg, st.sampled_from(["a", "b", T]), st.binary(max_size=64), st.binary(max_size=8)
    ),
    st.builds(
        keyed_msg, st.integers(0, 2**32 - 1), st.sampled_from(["a", "b"]), st.binary(max_size=64)
    ),
    st.binary(max_size=40),
    st.just(encode_any_partition(b"bad topic", b"v")),
    st.just(any_msg(value=b"x" * 300)),  # too large
)
steps = st.lists(
    st.one_of(
        datagrams.map(lambda d: ("send", d)),
        st.sampled_from([("attach", None), ("ack", None), ("discard", None)]),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(steps)
def test_identity_holds_after_every_step(script: list[tuple[str, bytes | None]]) -> None:
    h = Harness(
        buffer_max_bytes=1000,
        max_message_bytes=256,
        policy=BatchPolicy(max_messages=3, max_bytes=200),
    )
    for action, datagram in script:
        if action == "send":
            assert datagram is not None
            h.send(datagram)
        elif action == "attach":
            for topic in h.forwarder.topics_by_name.values():
                if not topic.producers:
                    h.attach(topic.name, partitions=len(topic.name) % 3)
        elif action == "ack":
            for topic in list(h.forwarder.topics_by_name.values()):
                if topic.producers:
                    h.ack_everything(topic.name)
        else:
            h.forwarder.discard_everything(reasons.SHUTDOWN)
            h.check()
    h.forwarder.discard_everything(reasons.SHUTDOWN)
    h.check()
    assert h.stats.buffered_messages == 0
    assert h.stats.received == sum(1 for action, _ in script if action == "send")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(datagrams, max_size=60))
def test_buffered_bytes_return_to_zero_once_everything_is_acked(batch: list[bytes]) -> None:
    h = Harness(buffer_max_bytes=2000, max_message_bytes=256, policy=BatchPolicy(max_messages=4))
    for datagram in batch:
        h.send(datagram)
    for topic in list(h.forwarder.topics_by_name.values()):
        h.attach(topic.name, partitions=2)
        h.ack_everything(topic.name)
    assert h.stats.buffered_messages == 0
    assert h.stats.buffered_bytes == 0


# -- the spool --------------------------------------------------------------------------------


def test_overflow_spills_in_order_and_replays_with_the_identity_intact() -> None:
    h = Harness(buffer_max_bytes=200)
    spooled: list[bytes] = []
    h.forwarder.spill = lambda datagram: spooled.append(datagram) or True
    h.send(any_msg(value=b"a" * 100))
    (producer,) = h.attach()
    h.send(any_msg(value=b"b" * 100))  # no room: to the spool, and the spool stays in charge
    h.send(any_msg(value=b"c"))  # would fit, but must queue behind "b"
    assert [d[-1:] for d in spooled] == [b"b", b"c"]
    assert h.stats.spooled_messages == 2 and h.forwarder.spilling
    for batch in producer.take_all():
        h.forwarder.on_acked(h.topic(), batch)
    h.check()
    for datagram in spooled:
        h.forwarder.replay_datagram(datagram, previous_run=False)
        h.check()
    assert h.stats.spooled_messages == 0 and h.stats.received == 3
    assert producer.batch.count == 2


def test_a_full_spool_means_buffer_full() -> None:
    h = Harness(buffer_max_bytes=150)
    h.forwarder.spill = lambda datagram: False
    h.send(any_msg(value=b"a" * 100))
    h.send(any_msg(value=b"b" * 100))
    assert discarded(h, "buffer_full") == 1


def test_previous_run_datagrams_count_as_received_when_replayed() -> None:
    h = Harness()
    h.forwarder.replay_datagram(any_msg(), previous_run=True)
    h.check()
    assert h.stats.received == 1 and h.stats.buffered_messages == 1
