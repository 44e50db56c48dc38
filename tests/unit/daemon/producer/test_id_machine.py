"""Any run of one producer against a deduplicating broker: every message stored once.

A hypothesis state machine drives one partition producer (``lifecycle_rig.py``:
the real producer, journal, replay and answer table) through sealing, sending,
splitting at the first send (the broker's max message size) and for the
topic's own size limit, receipts (``-1:-1`` for what the broker's
deduplication drops), failed writes (``SendError``), lost connections,
re-registration after another process used the name, crashes and journal
replays.  The broker is pulsar-broker's ``MessageDeduplication``
(``tests/support/fake_dedup.py``).  After every step: no message stored twice
unless the daemon reported it as a possible duplicate (a batch renumbered after
another process used the name, when a copy may be stored under its old ids),
none counted acked unless the broker stored it, none both stored and discarded;
at the end, once everything is settled, each message is stored exactly once,
or twice where reported, or was discarded.  With ``exactly_once`` (a sender's name and
ids, no journal) each message is also stored under the id its place gives it.
"""

from __future__ import annotations

import itertools
import shutil

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE
from pulsar_bruce.producer.framing import SEND_FRAME_OVERHEAD

from tests.unit.daemon.producer.lifecycle_rig import (
    NAME,
    Broker,
    Outcomes,
    Process,
    new_directory,
)

#: Bytes per message value: about 210 bytes per batch entry.
VALUE = 200
#: The broker's max message size: batches of more than about 7 (twice as often: so that
#: halves are split again) and 14 messages are cut at their first send; none.
FRAME_LIMITS = (
    SEND_FRAME_OVERHEAD + 1500,
    SEND_FRAME_OVERHEAD + 1500,
    SEND_FRAME_OVERHEAD + 3000,
    DEFAULT_MAX_MESSAGE_SIZE,
)
#: Topic size limits (of a Send's payload): none (twice as often), 6 or 2 messages, not one.
TOPIC_LIMITS = (1 << 30, 1 << 30, 1400, 500, 150)


class ProducerIdsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = new_directory()
        self.outcomes, self.broker = Outcomes(), Broker()
        self.process = Process(self.directory, self.outcomes, self.broker)
        self.values = itertools.count()
        self.sent: list[bytes] = []
        self.exactly_once = False

    def teardown(self) -> None:
        self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    @initialize(
        exactly_once=st.sampled_from((False, False, True)),
        frame_limit=st.sampled_from(FRAME_LIMITS),
        topic_limit=st.sampled_from(TOPIC_LIMITS),
    )
    def mode(self, exactly_once: bool, frame_limit: int, topic_limit: int) -> None:
        """A sender's producer or ours; the broker's and the topic's size limits.  The topic's
        limit is set before any message: the broker checks it before deduplication
        (``PersistentTopic.publishMessage``), so lowered while a stored batch waits for its
        receipt, it refuses the resend, and no client can tell the batch was stored."""
        self.process.max_frame = frame_limit
        self.broker.topic_limit = topic_limit
        self.exactly_once = exactly_once
        if exactly_once:
            self.process.producer.publish_as(NAME, 0)

    def _value(self) -> bytes:
        value = b"m%05d" % next(self.values)
        self.sent.append(value + b"." * (VALUE - len(value)))
        return self.sent[-1]

    @rule(count=st.integers(1, 30), seal=st.booleans())
    def add(self, count: int, seal: bool) -> None:
        self.process.add(*(self._value() for _ in range(count)))
        if seal:  # and written, as the driver does when a batch is sealed
            self.process.seal()
            self.process.flush()

    @precondition(lambda self: not self.process.connected)
    @rule()
    def reconnect(self) -> None:
        self.process.reconnect()

    @precondition(lambda self: self.broker.queue)
    @rule(answers=st.integers(1, 5))
    def answer(self, answers: int) -> None:
        for _ in range(min(answers, len(self.broker.queue))):
            self.process.answer()

    @precondition(lambda self: self.broker.queue)
    @rule()
    def failed_write(self) -> None:
        self.process.fail_writes()

    @rule(processed=st.integers(0, 5))
    def connection_lost(self, processed: int) -> None:
        self.process.drop_connection(processed)

    @precondition(
        lambda self: (
            not self.exactly_once
            and not self.process.connected
            and all(b.sequence_id < 0 for b in self.process.producer.pending)
        )
    )
    @rule(ids=st.integers(1, 50))
    def another_process_used_the_name(self, ids: int) -> None:
        """Ids above ours under our name: the next registration's last_sequence_id."""
        self.broker.someone_else_wrote(ids)

    @precondition(lambda self: not self.exactly_once)
    @rule(settles_recorded=st.booleans())
    def crash_and_replay(self, settles_recorded: bool) -> None:
        """The process is killed (maybe before the journal recorded what settled last)."""
        if settles_recorded:
            self.process.journal.tick()
        self.process.kill()
        max_frame = self.process.max_frame
        self.process = Process(self.directory, self.outcomes, self.broker)
        self.process.max_frame = max_frame

    @invariant()
    def nothing_stored_twice_or_counted_untrue(self) -> None:
        self.process.producer.check()
        stored, outcomes = self.broker.stored, self.outcomes
        twice = [v for v, n in stored.items() if n > 1]
        assert [v[:6] for v in twice if not outcomes.possibly_twice[v]] == []
        assert [v[:6] for v in outcomes.acked if not stored[v]] == []
        assert [v[:6] for v in outcomes.discarded if stored[v]] == []
        if self.exactly_once:
            first = {v: n for n, v in enumerate(self.sent)}
            assert [v[:6] for v, i in self.broker.id_of.items() if first[v] != i] == []

    def check_settled(self) -> None:
        """Everything sent and answered: each message stored once or discarded."""
        self.process.settle_all()
        self.nothing_stored_twice_or_counted_untrue()
        stored, discarded = self.broker.stored, self.outcomes.discarded
        assert [v[:6] for v in self.sent if not stored[v] and not discarded[v]] == []


class SettledMachine(ProducerIdsMachine):
    """The same runs, each ending with everything settled (checked in teardown)."""

    def teardown(self) -> None:
        try:
            self.check_settled()
        finally:
            super().teardown()


TestProducerIds = SettledMachine.TestCase
TestProducerIds.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, derandomize=True
)


def test_a_replay_renumbered_after_another_process_used_the_name_is_a_reported_duplicate() -> None:
    """Found by this model at 20x its examples: a batch stored and acked, the process killed
    before the journal recorded it, another process writes under the name, the replay is
    renumbered above that process's ids and stored again.  The broker cannot drop that copy
    (its ids are new), so the daemon must report it as a possible duplicate."""
    machine = SettledMachine()
    try:
        machine.mode(exactly_once=False, frame_limit=FRAME_LIMITS[-1], topic_limit=1 << 30)
        machine.add(count=1, seal=True)
        machine.reconnect()
        machine.answer(answers=1)
        machine.connection_lost(processed=0)
        machine.another_process_used_the_name(ids=1)
        machine.crash_and_replay(settles_recorded=False)
        machine.reconnect()
        machine.answer(answers=1)
        (value,) = machine.sent
        assert machine.broker.stored[value] == 2
        assert machine.outcomes.possibly_twice[value] == 1
        machine.nothing_stored_twice_or_counted_untrue()
    finally:
        machine.teardown()
