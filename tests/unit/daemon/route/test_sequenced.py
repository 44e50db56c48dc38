"""SequencedSender (route/sequenced.py): every choice depends on the records alone, so a
retried sender's messages get the same partitions and ids; the intake's checks and the
ledger's identity hold as for any stream record."""

from __future__ import annotations

from pulsar_bruce import reasons
from pulsar_bruce.input.stream_session import API_KEY_FLUSH_REQUEST, encode_flush_request
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.parse.producer_record import encode_producer_record
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.sequenced import SequencedSender
from pulsar_bruce.route.topic import Topic
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.any_topic import to_any_topic
from tests.unit.daemon.route.intake_harness import Harness, T

FIRST_ID = 7 << 32


class SequencedHarness(Harness):
    """The intake harness, with the topic manager's part for sequenced producers."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[tuple[str, int, str, int]] = []
        self.retired: list[PartitionProducer] = []
        self._ids = 100

    def open_sequenced(
        self, topic: Topic, partition: int, name: str, first_sequence_id: int
    ) -> PartitionProducer:
        self.opened.append((topic.name, partition, name, first_sequence_id))
        self._ids += 1
        producer = PartitionProducer(f"{topic.name}-partition-{partition}", partition, self._ids,
                                     self.batch_policy)  # fmt: skip
        producer.publish_as(name, first_sequence_id)
        topic.add_sequenced(producer)
        return producer

    def retire_sequenced(self, producers: list[PartitionProducer]) -> None:
        self.retired.extend(producers)

    def in_memory(self) -> tuple[int, int]:
        messages, charge = super().in_memory()
        for topic in self.registry:
            for producer in topic.sequenced:
                charge += producer.batch.charged + sum(b.buffer_bytes for b in producer.pending)
        return messages, charge

    def attach(
        self, name: str = T, partitions: int = 0, ready: bool = True
    ) -> list[PartitionProducer]:
        if name not in self.registry.by_name:
            self.registry.add(name.encode())
        return super().attach(name, partitions, ready)

    def sender(self, name: str = "job-1-p0") -> SequencedSender:
        return SequencedSender(self.intake, self, name, FIRST_ID)


def ids_by_partition(topic: Topic) -> dict[int, list[tuple[int, int]]]:
    """Each sequenced producer's sealed batches as (first id, count)."""
    out = {}
    for producer in topic.sequenced:
        producer.seal()
        out[producer.partition] = [(b.sequence_id, b.count) for b in producer.pending]
    return out


def test_round_robin_by_position_and_ids_counted_per_partition() -> None:
    h = SequencedHarness()
    sender = h.sender()
    tag = Confirmation(lambda: None)
    assert sender.admit(encode_any_partition(T, b"first"), tag) is False  # count unknown yet
    h.check()
    h.attach(partitions=3)
    for i in range(7):
        assert sender.admit(encode_any_partition(T, b"m%d" % i), tag)
        h.check()
    assert h.opened == [(T, 0, "job-1-p0", FIRST_ID), (T, 1, "job-1-p0", FIRST_ID),
                        (T, 2, "job-1-p0", FIRST_ID)]  # fmt: skip
    assert ids_by_partition(h.topic()) == {
        0: [(FIRST_ID, 3)],  # positions 0, 3, 6
        1: [(FIRST_ID, 2)],
        2: [(FIRST_ID, 2)],
    }
    assert tag.outstanding == 7
    assert not any(p.batch.count for p in h.topic().producers)  # the daemon's own: untouched


def test_partition_keys_pick_their_partition_and_never_fail_over() -> None:
    h = SequencedHarness()
    h.attach(partitions=4, ready=False)  # no partition is ready: no failover either
    sender = h.sender()
    for key in (5, 6, 9, 2**32 - 1):
        assert sender.admit(encode_partition_key(key, T, b"v"), None)
    assert sorted((p.partition, p.batch.count) for p in h.topic().sequenced) == [
        (1, 2), (2, 1), (3, 1)]  # fmt: skip


def test_the_same_records_give_the_same_partitions_and_ids_again() -> None:
    records = [encode_any_partition(T, b"%d" % i) for i in range(5)] + [
        encode_partition_key(11, T, b"k"),
        b"\x00\x00\x00\x08\x01\x00\x00\x00",  # malformed: discarded, still a position
        encode_any_partition(T, b"last"),
    ]

    def attempt() -> dict[int, list[tuple[int, int]]]:
        h = SequencedHarness()
        h.attach(partitions=2)
        sender = h.sender()
        assert sender.admit_records(records, 0, None, API_KEY_FLUSH_REQUEST) == len(records)
        assert h.ledger.discarded[reasons.MALFORMED] == 1
        return ids_by_partition(h.topic())

    first = attempt()
    assert first == attempt()
    assert first == {0: [(FIRST_ID, 3)], 1: [(FIRST_ID, 4)]}


def test_admission_stops_at_a_flush_request_and_at_a_producer_record() -> None:
    h = SequencedHarness()
    h.attach()
    sender = h.sender()
    m = encode_any_partition(T, b"v")
    flush, producer = encode_flush_request(1), encode_producer_record("other", 0)
    assert sender.admit_records([m, m, flush, m], 0, None, API_KEY_FLUSH_REQUEST) == 2
    assert sender.admit_records([m, producer, m], 0, None, API_KEY_FLUSH_REQUEST) == 1


def test_the_intakes_checks_apply_and_are_counted() -> None:
    h = SequencedHarness()
    h.attach()
    sender = h.sender()
    tag = Confirmation(lambda: None)
    bad = to_any_topic("bad topic name!", lambda name: encode_any_partition(name, b"v"))
    assert sender.admit(bad, tag)
    assert sender.admit(b"\x00" * 8, tag)
    assert h.ledger.discarded[reasons.BAD_TOPIC] == 1
    assert tag.discarded == {reasons.BAD_TOPIC: 1, reasons.MALFORMED: 1}
    assert sender.position == 2
    h.check()


def test_no_memory_means_wait_not_discard() -> None:
    h = SequencedHarness()
    h.attach()
    h.policy.memory_limit = 0
    sender = h.sender()
    before = h.snapshot()
    assert sender.admit(encode_any_partition(T, b"v"), Confirmation(lambda: None)) is False
    assert h.snapshot() == before and sender.position == 0


def test_end_retires_every_producer_the_connection_opened() -> None:
    h = SequencedHarness()
    h.attach(partitions=2)
    sender = h.sender()
    for _ in range(2):
        sender.admit(encode_any_partition(T, b"v"), None)
    sender.end()
    assert sorted(p.partition for p in h.retired) == [0, 1]


def test_a_spent_rate_budget_is_backpressure_and_no_id_is_skipped() -> None:
    """Whether a record finds its topic's rate budget spent depends on timing: the record
    waits (nothing counted) and takes the next id when the budget is refilled, so the n-th
    record gets first id + n in every attempt (issue 29, bug 3)."""
    h = SequencedHarness()
    h.attach()
    topic = h.topic()
    topic.rate_budget = 2
    sender = h.sender()
    records = [encode_any_partition(T, b"r%d" % i) for i in range(4)]
    assert sender.admit_records(records, 0, None, API_KEY_FLUSH_REQUEST) == 2
    assert h.ledger.discarded[reasons.RATE_LIMITED] == 0
    h.check()
    topic.rate_budget = 2  # the next interval
    assert sender.admit_records(records, 2, None, API_KEY_FLUSH_REQUEST) == 4
    assert ids_by_partition(topic) == {0: [(FIRST_ID, 4)]}
