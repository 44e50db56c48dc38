"""The intake's test harness: the real sans-IO parts (registry, appender, ledger, spool
policy with a real :class:`SpoolStore`, outcomes) behind a recording edge, checking
after every step that the ledger's identity holds and agrees with what memory holds.
Shared by test_intake.py, test_appender.py, test_intake_replay.py and
test_intake_identity.py."""

from __future__ import annotations

import functools
import itertools
import struct
from pathlib import Path

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import encode_key_field, entry_offsets
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import Ledger, memory_charge
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.service.shutdown import keep_or_discard_the_rest
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.spooler import Spooler
from pulsar_bruce.spool.store import SpoolStore
from to_pulsar.encoding import encode_any_partition, encode_partition_key

T = "persistent://public/default/t"


class RecordingEvents:
    """The appender's fake edge: what it wrote down, taken and kept."""

    def __init__(self, appender: Appender) -> None:
        self.appender = appender
        self.opened: list[PartitionProducer] = []
        self.sealed: list[PartitionProducer] = []

    def named(self, kind: str) -> list[PartitionProducer]:
        opened, sealed = self.appender.take_batches()
        self.opened += opened
        self.sealed += sealed
        return {"batch_opened": self.opened, "batch_sealed": self.sealed}[kind]


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
        self.added: list[Topic] = []
        self.registry = TopicRegistry(self)
        self.appender = Appender()
        self.events = RecordingEvents(self.appender)
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
                brokers=self,
                writer=self,
            )
            self.spooler.open()
        self._next_id = 1

    @property
    def connections(self) -> list[object]:
        """The broker connections the spooler sees: one while ``reachable``."""
        return [object()] if self.reachable else []

    def flush_dirty(self) -> None:
        """The topic manager's part after a replay (the recording edge takes the batches)."""

    def apply(self, topic: Topic) -> None:
        """What the registry has the configurator do for a new topic: its settings."""
        self.added.append(topic)
        if self.topic_max_message_bytes is not None:
            topic.max_message_bytes = self.topic_max_message_bytes
        topic.rate_budget = self.rate_budget

    # -- input ------------------------------------------------------------------------

    def write_held(self) -> None:
        """A socket drain ended: what the policy holds to disk, as ``Pipeline.after_drain``
        does (where the disk refuses, memory keeps what it has room for)."""
        self.policy.write_held(functools.partial(self.intake.replay_datagram, previous_run=False))

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
        topic.attach(producers, partitioned=partitions > 0)
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
        """What the server does at shutdown with a spool (the part after the receipt wait,
        ``service/shutdown.keep_or_discard_the_rest``); whether memory went to disk."""
        assert self.spooler is not None
        discarded = self.ledger.discarded_total
        keep_or_discard_the_rest(self.registry, self.ledger, self.outcomes, self.spooler, False)
        self.check()
        return self.ledger.discarded_total == discarded


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
