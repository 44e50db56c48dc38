"""The ledger: every method keeps ``received == acked + discarded + buffered``."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pulsar_bruce import reasons
from pulsar_bruce.model.ledger import ENTRY_OVERHEAD, Ledger, TopicCounters, memory_charge

from tests.support.model_runs import model_settings

DAEMON = Path(__file__).resolve().parents[4] / "daemon" / "pulsar_bruce"


def test_a_new_ledger_is_empty_and_knows_every_reason() -> None:
    ledger = Ledger()
    assert ledger.discarded == dict.fromkeys(reasons.ALL, 0)  # every label exported from the start
    counters = (ledger.received, ledger.acked, ledger.buffered_messages, ledger.buffered_bytes)
    assert counters == (0, 0, 0, 0)
    assert ledger.discarded_total == 0
    assert ledger.identity_holds()


def test_reject_counts_for_the_topic_when_there_is_one() -> None:
    ledger, topic = Ledger(), TopicCounters()
    ledger.reject(reasons.MALFORMED)
    ledger.reject(reasons.RATE_LIMITED, topic)
    ledger.reject(reasons.RATE_LIMITED, topic)
    assert (ledger.received, ledger.discarded_total) == (3, 3)
    assert ledger.discarded[reasons.RATE_LIMITED] == 2
    assert topic.discarded == {reasons.RATE_LIMITED: 2}
    assert ledger.identity_holds()


def test_a_message_taken_and_acked() -> None:
    ledger, topic = Ledger(), TopicCounters()
    ledger.accept(40)
    ledger.accept(2)
    assert (ledger.received, ledger.buffered_messages, ledger.buffered_bytes) == (2, 2, 42)
    ledger.ack(topic, 2, 42)
    assert (ledger.acked, ledger.buffered_messages, ledger.buffered_bytes) == (2, 0, 0)
    assert topic.acked == 2 and topic.discarded == {}
    assert ledger.identity_holds()


def test_a_spilled_message_is_buffered_but_charges_no_memory() -> None:
    ledger = Ledger()
    ledger.spill()
    assert (ledger.received, ledger.buffered_messages, ledger.spooled_messages) == (1, 1, 1)
    assert ledger.buffered_bytes == 0
    ledger.unspill(30)  # replayed by this run: received already
    assert (ledger.received, ledger.spooled_messages, ledger.buffered_bytes) == (1, 0, 30)
    assert ledger.identity_holds()


def test_readmitted_messages_are_received_now() -> None:
    ledger = Ledger()
    ledger.readmit(5, 100)
    assert (ledger.received, ledger.buffered_messages, ledger.buffered_bytes) == (5, 5, 100)
    ledger.discard(reasons.BAD_TOPIC, 5, 100, None)
    assert (ledger.buffered_messages, ledger.buffered_bytes) == (0, 0)
    assert ledger.identity_holds()


def test_to_disk_and_discard_spilled() -> None:
    ledger = Ledger()
    for _ in range(3):
        ledger.accept(10)
    ledger.to_disk(3, 30)  # shutdown: memory to the spool, still buffered
    assert (ledger.buffered_messages, ledger.spooled_messages, ledger.buffered_bytes) == (3, 3, 0)
    ledger.discard_spilled(reasons.BUFFER_FULL, 2)
    assert (ledger.buffered_messages, ledger.spooled_messages) == (1, 1)
    assert ledger.discarded[reasons.BUFFER_FULL] == 2
    assert ledger.identity_holds()


def test_discard_counts_for_the_topic_when_there_is_one() -> None:
    ledger, topic = Ledger(), TopicCounters()
    for _ in range(4):
        ledger.accept(1)
    ledger.discard(reasons.SHUTDOWN, 3, 3, topic)
    ledger.discard(reasons.SHUTDOWN, 1, 1, None)
    assert ledger.discarded[reasons.SHUTDOWN] == 4
    assert topic.discarded == {reasons.SHUTDOWN: 3}
    assert ledger.identity_holds()


def test_sent_and_possible_duplicates_do_not_move_messages() -> None:
    ledger = Ledger()
    ledger.accept(1)
    ledger.sent(batches=3, resent_messages=7)
    ledger.possible_duplicate(2)
    assert (ledger.batches_sent, ledger.possible_duplicates) == (3, 9)
    assert (ledger.received, ledger.buffered_messages) == (1, 1)
    assert ledger.identity_holds()


def test_identity_holds_catches_a_lost_message() -> None:
    ledger = Ledger()
    ledger.accept(1)
    ledger.buffered_messages = 0  # what no module but the ledger may do
    assert not ledger.identity_holds()


def test_memory_charge_is_key_value_and_entry_overhead() -> None:
    assert ENTRY_OVERHEAD == 21
    assert memory_charge(b"", 0) == 21
    assert memory_charge(b"\x12\x01k", 10) == 3 + 10 + 21


# -- any sequence of valid transitions ------------------------------------------------------

REASONS = st.sampled_from(reasons.ALL)
CHARGES = st.integers(0, 5000)
COUNTS = st.integers(1, 5)


class LedgerMachine(RuleBasedStateMachine):
    """The ledger next to a model that tracks every message (and its charge) by where it is."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()
        self.topics = [TopicCounters(), TopicCounters()]
        self.memory: list[int] = []  # the charge of each message in memory, oldest first
        self.spooled = 0
        self.received = self.acked = 0
        self.discarded: dict[str, int] = {}
        self.topic_acked = [0, 0]
        self.topic_discarded: list[dict[str, int]] = [{}, {}]

    def _discarded(self, reason: str, count: int, topic: int | None) -> None:
        self.discarded[reason] = self.discarded.get(reason, 0) + count
        if topic is not None:
            per_topic = self.topic_discarded[topic]
            per_topic[reason] = per_topic.get(reason, 0) + count

    def _take(self, count: int) -> tuple[int, int]:
        """The oldest ``count`` messages in memory leave it: (how many, their charge)."""
        taken, self.memory = self.memory[:count], self.memory[count:]
        return len(taken), sum(taken)

    @rule(reason=REASONS, topic=st.sampled_from([None, 0, 1]))
    def reject(self, reason: str, topic: int | None) -> None:
        self.ledger.reject(reason, None if topic is None else self.topics[topic])
        self.received += 1
        self._discarded(reason, 1, topic)

    @rule(charge=CHARGES)
    def accept(self, charge: int) -> None:
        self.ledger.accept(charge)
        self.received += 1
        self.memory.append(charge)

    @rule()
    def spill(self) -> None:
        self.ledger.spill()
        self.received += 1
        self.spooled += 1

    @precondition(lambda self: self.spooled > 0)
    @rule(charge=CHARGES)
    def unspill(self, charge: int) -> None:
        self.ledger.unspill(charge)
        self.spooled -= 1
        self.memory.append(charge)

    @rule(count=COUNTS, charge=CHARGES)
    def readmit(self, count: int, charge: int) -> None:
        self.ledger.readmit(count, charge)
        self.received += count
        self.memory += [charge] + [0] * (count - 1)

    @precondition(lambda self: self.memory)
    @rule(count=COUNTS)
    def to_disk(self, count: int) -> None:
        count, charge = self._take(count)
        self.ledger.to_disk(count, charge)
        self.spooled += count

    @precondition(lambda self: self.spooled > 0)
    @rule(reason=REASONS, count=COUNTS)
    def discard_spilled(self, reason: str, count: int) -> None:
        count = min(count, self.spooled)
        self.ledger.discard_spilled(reason, count)
        self.spooled -= count
        self._discarded(reason, count, None)

    @precondition(lambda self: self.memory)
    @rule(count=COUNTS, topic=st.sampled_from([0, 1]))
    def ack(self, count: int, topic: int) -> None:
        count, charge = self._take(count)
        self.ledger.ack(self.topics[topic], count, charge)
        self.acked += count
        self.topic_acked[topic] += count

    @precondition(lambda self: self.memory)
    @rule(reason=REASONS, count=COUNTS, topic=st.sampled_from([None, 0, 1]))
    def discard(self, reason: str, count: int, topic: int | None) -> None:
        count, charge = self._take(count)
        self.ledger.discard(reason, count, charge, None if topic is None else self.topics[topic])
        self._discarded(reason, count, topic)

    @rule(batches=st.integers(0, 3), resent=st.integers(0, 10), more=st.integers(0, 10))
    def sent(self, batches: int, resent: int, more: int) -> None:
        before = (self.ledger.batches_sent, self.ledger.possible_duplicates)
        self.ledger.sent(batches, resent)
        self.ledger.possible_duplicate(more)
        after = (self.ledger.batches_sent, self.ledger.possible_duplicates)
        assert after == (before[0] + batches, before[1] + resent + more)

    @invariant()
    def identity(self) -> None:
        ledger = self.ledger
        assert ledger.identity_holds()
        assert ledger.received == self.received
        assert ledger.acked == self.acked
        assert {k: v for k, v in ledger.discarded.items() if v} == {
            k: v for k, v in self.discarded.items() if v
        }
        assert ledger.buffered_messages == len(self.memory) + self.spooled
        assert ledger.spooled_messages == self.spooled
        assert ledger.buffered_bytes == sum(self.memory)  # 0 exactly when memory is empty

    @invariant()
    def per_topic(self) -> None:
        for index, topic in enumerate(self.topics):
            assert topic.acked == self.topic_acked[index]
            assert topic.discarded == self.topic_discarded[index]
        assert self.ledger.acked == sum(topic.acked for topic in self.topics)


TestLedgerTransitions = LedgerMachine.TestCase
TestLedgerTransitions.settings = model_settings(examples=200, steps=50)


# -- nobody else writes the counters ------------------------------------------------------------

COUNTERS = {
    "received",
    "acked",
    "discarded",
    "buffered_messages",
    "buffered_bytes",
    "spooled_messages",
    "possible_duplicates",
    "batches_sent",
}


def counter_writes(tree: ast.AST) -> list[int]:
    """Lines that assign to ``<...ledger or stats>.<counter>`` (or an item of one)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            while isinstance(target, ast.Subscript):
                target = target.value
            if not isinstance(target, ast.Attribute) or target.attr not in COUNTERS:
                continue
            owner = target.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if "ledger" in name or name == "stats":
                lines.append(node.lineno)
    return lines


def test_the_guard_below_finds_a_write() -> None:
    source = "self.ledger.received += 1\nledger.discarded['x'] = 0\ntopic.stats.acked = 3\n"
    assert counter_writes(ast.parse(source)) == [1, 2, 3]


def test_only_the_ledger_writes_its_counters() -> None:
    assert (DAEMON / "route" / "intake.py").is_file()
    writers = {
        str(path.relative_to(DAEMON)): lines
        for path in sorted(DAEMON.rglob("*.py"))
        if path.name != "ledger.py" and "_pb2" not in path.name
        if (lines := counter_writes(ast.parse(path.read_text())))
    }
    assert writers == {}
