"""Any run of one producer against a broker that fails like BookKeeper: nothing lost or untrue.

A hypothesis state machine drives one partition producer (``lifecycle_rig.py``:
the real producer, journal, replay and answer table) against ``broker_model.py``'s
broker: pulsar-broker's ``MessageDeduplication`` (pushed before persisted,
``last_sequence_id`` from pushed), a bookie that persists late, in order, or
fails every pending write (the topic fenced, pushed reset to persisted), Sends
refused while the next ones are stored (``ChecksumError``, the topic's size limit
lowered mid-flight, ``MessageDupUnknownException``), receipts lost with
connections, closes that time out while the bookie holds a write, a sender's
other attempt storing its ids, non-persistent topics that drop, splits at the
first send, send timeouts, shutdowns (with a spool: its front replayed by the next
run), attempt caps, crashes and journal replays.

After every step: no message stored twice unless the daemon reported it as a
possible duplicate, none counted acked unless stored, none given up with a
reason that says "not stored" (anything but ``unconfirmed``) and stored by our
copy, none given up as ``unconfirmed`` when the daemon read a refusal of every
write of it.  At the end, once the bookie has landed everything and every
message is answered: each stored once (twice where reported) or discarded.
With ``exactly_once`` (a sender's name and ids, no journal) each message is
stored under the id its place gives it.  It found issue 36's paths 1-6 and 9 on
the code before their fixes (``test_bookkeeper_paths.py`` has each as a test).
"""

from __future__ import annotations

import itertools
import shutil

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pulsar_bruce import reasons
from pulsar_bruce.frame.codec import DEFAULT_MAX_MESSAGE_SIZE
from pulsar_bruce.producer.framing import SEND_FRAME_OVERHEAD

from tests.support.model_runs import model_settings
from tests.unit.daemon.producer.lifecycle_rig import (
    NAME,
    Broker,
    Outcomes,
    Process,
    new_directory,
)

#: Bytes per message value: about 210 bytes per batch entry.
VALUE = 200
#: A value that goes in 2 or 3 chunks at the smaller broker limits below.
LARGE_VALUE = 2600
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
        self.outcomes, self.broker = Outcomes(), Broker(persist_at_once=False)
        self.process = Process(self.directory, self.outcomes, self.broker)
        self.values = itertools.count()
        self.sent: list[bytes] = []
        self.exactly_once = False

    def teardown(self) -> None:
        self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    @initialize(
        exactly_once=st.sampled_from((False, False, True)),
        persistent=st.sampled_from((True, True, True, False)),
        frame_limit=st.sampled_from(FRAME_LIMITS),
        topic_limit=st.sampled_from(TOPIC_LIMITS),
        max_attempts=st.sampled_from((0, 3)),
    )
    def mode(
        self,
        exactly_once: bool,
        frame_limit: int,
        topic_limit: int,
        persistent: bool = True,
        max_attempts: int = 0,
    ) -> None:
        """A sender's producer or ours; a persistent topic or not; the broker's and the topic's
        size limits (the topic's may be lowered later: :meth:`lower_topic_limit`)."""
        if not persistent:
            self.process.kill()
            self.broker = Broker(persistent=False, persist_at_once=False)
            self.process = Process(self.directory, self.outcomes, self.broker)
        self.process.max_frame = frame_limit
        self.process.max_attempts = max_attempts
        self.broker.topic_limit = topic_limit
        self.exactly_once = exactly_once
        if exactly_once:
            self.process.producer.publish_as(NAME, 0)

    def _value(self, size: int = VALUE) -> bytes:
        value = b"m%05d" % next(self.values)
        self.sent.append(value + b"." * (size - len(value)))
        return self.sent[-1]

    @rule(count=st.integers(1, 30), seal=st.booleans())
    def add(self, count: int, seal: bool) -> None:
        self.process.add(*(self._value() for _ in range(count)))
        if seal:  # and written, as the driver does when a batch is sealed
            self.process.seal()
            self.process.flush()

    @precondition(lambda self: self.broker.persistent)
    @rule(seal=st.booleans())
    def add_large(self, seal: bool) -> None:
        """A value over the smaller broker limits: cut out of its batch, sent alone in chunks
        (each chunk answered; the last one judged by deduplication).  Not on a non-persistent
        topic, which may drop one chunk and store the rest: not covered (docs/delivery.md)."""
        self.process.add(self._value(LARGE_VALUE))
        if seal:
            self.process.seal()
            self.process.flush()

    @precondition(lambda self: not self.process.connected)
    @rule()
    def reconnect(self) -> None:
        self.process.reconnect()

    @precondition(lambda self: self.broker.queue)
    @rule(sends=st.integers(1, 5))
    def broker_judges(self, sends: int) -> None:
        """The broker judges Sends; what is not refused goes to the bookie."""
        for _ in range(min(sends, len(self.broker.queue))):
            self.broker.process()

    @precondition(lambda self: self.broker.bookie)
    @rule(writes=st.integers(1, 5))
    def bookie_persists(self, writes: int) -> None:
        self.broker.persist(writes)

    @precondition(lambda self: self.broker.answers)
    @rule(answers=st.integers(1, 5))
    def daemon_reads(self, answers: int) -> None:
        self.process.read(answers)

    @precondition(lambda self: self.broker.queue)
    @rule(answers=st.integers(1, 5))
    def answer(self, answers: int) -> None:
        """Judged, persisted and read at once (the common case)."""
        for _ in range(min(answers, len(self.broker.queue))):
            self.broker.process()
            self.broker.persist(len(self.broker.bookie))
            self.process.read_all()

    @precondition(lambda self: self.broker.queue or self.broker.bookie)
    @rule()
    def failed_write(self) -> None:
        """A write fails: the topic is fenced, every Send written and write pending fails."""
        self.process.fail_writes()

    @precondition(lambda self: self.broker.bookie)
    @rule()
    def bookie_fails(self) -> None:
        """The pending writes fail (answered on their connection, if it is still there)."""
        self.broker.fail_bookie()

    @precondition(lambda self: self.broker.queue)
    @rule()
    def corrupted_on_the_way(self) -> None:
        """The oldest Send fails its checksum; the Sends behind it go on.  The daemon reads the
        answer (a ChecksumError lost with its connection while a later batch is stored is a
        loss no client can see: docs/delivery.md, not covered)."""
        self.broker.corrupt_next = True
        self.broker.process()
        self.process.read_all()

    @precondition(lambda self: not self.broker.persistent and self.broker.queue)
    @rule()
    def dropped_under_load(self) -> None:
        """A non-persistent topic drops the oldest Send (a receipt for -1:-1)."""
        self.broker.overloaded = True
        self.broker.process()

    @rule(limit=st.sampled_from(TOPIC_LIMITS[2:]))
    def lower_topic_limit(self, limit: int) -> None:
        """The topic's max message size policy is lowered mid-flight."""
        self.broker.topic_limit = min(self.broker.topic_limit, limit)

    @precondition(lambda self: self.process.connected and self.process.producer.in_flight)
    @rule()
    def receipt_overdue(self) -> None:
        """No receipt within ``receipt_timeout_s``: the producer is re-created."""
        producer = self.process.producer
        self.process._recreate("no receipt", producer.pending[0])

    @rule(processed=st.integers(0, 5))
    def connection_lost(self, processed: int) -> None:
        self.process.drop_connection(processed)

    @rule()
    def send_timeout(self) -> None:
        """``--send-timeout-s`` gives up every batch sealed so far."""
        self.process.time_out()

    @rule()
    def shutdown(self) -> None:
        """A shutdown without a spool gives up what is left."""
        self.process.shut_down()

    @precondition(lambda self: self.process.closing and not self.broker.bookie)
    @rule()
    def close_answered(self) -> None:
        """A re-created producer's CloseProducer is answered; it registers again later."""
        self.process.close_answered()

    @precondition(lambda self: not self.exactly_once)
    @rule()
    def shutdown_to_spool_and_restart(self) -> None:
        """A shutdown with a spool keeps what is left (with the ids it went under, or the
        mark that it may be stored) at the spool's front; the next run replays it."""
        front = self.process.shut_down_to_spool()
        max_frame, max_attempts = self.process.max_frame, self.process.max_attempts
        self.process = Process(self.directory, self.outcomes, self.broker, max_attempts, front)
        self.process.max_frame = max_frame

    @precondition(
        lambda self: (
            not self.exactly_once
            and self.broker.persistent
            and not self.process.connected
            and all(b.sequence_id < 0 for b in self.process.producer.pending)
        )
    )
    @rule(ids=st.integers(1, 50))
    def another_process_used_the_name(self, ids: int) -> None:
        """Ids above ours under our name: the next registration's last_sequence_id."""
        self.broker.someone_else_wrote(ids)

    @precondition(
        lambda self: (
            self.exactly_once
            and self.broker.persistent
            and not self.process.connected
            and not self.process.closing
        )
    )
    @rule(count=st.integers(1, 30))
    def other_attempt_stores(self, count: int) -> None:
        """The sender's other attempt (a retried task) stores its next ``count`` messages under
        the sender's name while our producer is away, then frees the name."""
        upto = min(len(self.sent), self.broker.last_sequence_id() + 1 + count)
        self.broker.other_attempt_stores(self.sent[:upto])

    @precondition(lambda self: not self.exactly_once)
    @rule(settles_recorded=st.booleans())
    def crash_and_replay(self, settles_recorded: bool) -> None:
        """The process is killed (maybe before the journal recorded what settled last)."""
        if settles_recorded:
            self.process.tick()
        self.process.kill()
        max_frame, max_attempts = self.process.max_frame, self.process.max_attempts
        self.process = Process(self.directory, self.outcomes, self.broker, max_attempts)
        self.process.max_frame = max_frame

    @invariant()
    def nothing_stored_twice_or_counted_untrue(self) -> None:
        self.process.producer.check()
        broker, outcomes = self.broker, self.outcomes
        stored = broker.stored
        if broker.persistent:  # a non-persistent topic keeps no ids: a resend may store twice
            twice = [v for v, n in stored.items() if n > 1]
            assert [v[:6] for v in twice if not outcomes.possibly_twice[v]] == []
        assert [v[:6] for v in outcomes.acked if not stored[v]] == []
        lost = [v for v in outcomes.discarded if outcomes.reason[v] != reasons.UNCONFIRMED]
        ours = [v for v in lost if stored[v] > broker.stored_by_other[v]]
        assert [(v[:6], outcomes.reason[v]) for v in ours] == []
        assert [v[:6] for v in outcomes.certainly_unstored] == []
        if self.exactly_once:
            first = {v: n for n, v in enumerate(self.sent)}
            assert [v[:6] for v, i in self.broker.id_of.items() if first[v] != i] == []

    def check_settled(self) -> None:
        """Everything sent, written and answered: each message stored once or discarded."""
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
TestProducerIds.settings = model_settings(examples=1000, steps=50)


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



def test_a_ridden_out_refusal_overtaken_by_a_later_batch_is_not_replayed_under_its_ids() -> None:
    """Found by ``make test-models`` (20,000 random examples): a batch's first write was still
    being persisted when its resend was refused (``MessageDupUnknownException``), so it rode
    that out under its ids, and the journal kept them; the bookie failed the first write, and
    the batch written after it was stored.  A crash then replayed the batch under its ids,
    the broker took them for duplicates of the later batch (-1:-1) and it counted acked,
    never stored.  Once an id above it may be stored, the journal records it as refused: the
    replay gives it new ids, as a possible duplicate."""
    machine = SettledMachine()
    try:
        machine.mode(exactly_once=False, frame_limit=2524, topic_limit=1 << 30)
        machine.add(count=8, seal=False)
        machine.crash_and_replay(settles_recorded=False)
        machine.reconnect()
        machine.receipt_overdue()
        machine.reconnect()
        machine.broker_judges(sends=1)  # the resend of the first batch: its first write pends
        machine.bookie_fails()
        machine.answer(answers=1)  # the refusal, then the second batch stored
        machine.crash_and_replay(settles_recorded=False)
        machine.check_settled()
        first = machine.sent[:4]
        assert [machine.broker.stored[v] for v in first] == [1, 1, 1, 1]
        assert [v in machine.outcomes.acked for v in first] == [True] * 4
    finally:
        machine.teardown()


def test_a_refused_batch_spooled_at_shutdown_does_not_offer_its_old_ids_again() -> None:
    """Found by this model once it shut down to a spool: a batch refused (a checksum error)
    while the batches written after it were stored waits, under its ids, to go under new
    ones.  A shutdown spooled it with those ids, the next run offered them again, the broker
    dropped it as a duplicate of the later batches (-1:-1) and it counted acked, never
    stored.  It goes to the spool without them now, as the journal records it."""
    machine = SettledMachine()
    try:
        machine.mode(exactly_once=False, frame_limit=FRAME_LIMITS[1], topic_limit=500)
        machine.reconnect()
        machine.add(count=8, seal=True)
        for _ in range(4):
            machine.corrupted_on_the_way()
        machine.receipt_overdue()
        machine.close_answered()
        machine.reconnect()
        machine.corrupted_on_the_way()
        machine.answer(answers=1)
        machine.shutdown_to_spool_and_restart()
        machine.reconnect()
        machine.answer(answers=1)
        machine.check_settled()
    finally:
        machine.teardown()


def test_a_senders_refused_batches_behind_a_chunked_message_refused_for_its_size() -> None:
    """Found by this model at 20x its examples: a sender's producer (exactly once) writes a
    batch and two single messages that the broker refuses (checksum errors), then a message
    in two chunks whose first chunk the topic's size limit refuses and whose last is stored,
    which records its id.  The message was discarded at once, so that receipt matched
    nothing and the three refused batches went again under ids the broker held: answered
    -1:-1, counted acked, never stored.  The message now waits for its last chunk's answer
    like any refused batch, and the sender gets the three back as ``broker_rejected``."""
    machine = SettledMachine()
    try:
        machine.mode(exactly_once=True, frame_limit=FRAME_LIMITS[1], topic_limit=1400)
        machine.add(count=4, seal=False)
        machine.add_large(seal=True)
        machine.reconnect()
        for _ in range(3):
            machine.corrupted_on_the_way()
        machine.check_settled()
        reason = machine.outcomes.reason
        assert [reason[v] for v in machine.sent] == [reasons.BROKER_REJECTED] * 4 + [
            reasons.TOO_LARGE
        ]
    finally:
        ProducerIdsMachine.teardown(machine)  # without the settled check it would repeat


def test_a_refused_chunk_of_a_message_already_given_up_is_not_replayed_under_its_id() -> None:
    """Found by this model at twenty times its examples: a message in two chunks goes out
    (from the spool of an earlier run), the send timeout gives it up, then the broker
    refuses its first chunk (a checksum error) and stores its last, which records its id.
    The process crashed before the give-up was journalled, so the next run replayed the
    message under that id: its last chunk dropped as a duplicate, the message counted
    acked, and no consumer could put it together.  The refusal now writes the give-up at
    once (``SendJournal.settle_now``)."""
    machine = SettledMachine()
    try:
        machine.mode(exactly_once=False, frame_limit=2524, topic_limit=1 << 30)
        machine.add_large(seal=False)
        machine.shutdown_to_spool_and_restart()
        machine.reconnect()
        machine.send_timeout()
        machine.corrupted_on_the_way()
        machine.answer(answers=1)
        machine.crash_and_replay(settles_recorded=False)
        machine.check_settled()
        assert machine.outcomes.reason == {machine.sent[0]: reasons.UNCONFIRMED}
    finally:
        ProducerIdsMachine.teardown(machine)  # without the settled check it would repeat


def test_a_message_made_up_of_two_writes_chunks_is_not_called_unstored() -> None:
    """Found by this model at twenty times its examples: a sender's message in two chunks;
    the first chunk is stored, the last refused (a checksum error); written again, its
    first chunk is refused and its last stored, which with the first write's first chunk
    (one uuid) makes up the message.  It went back to the sender as ``broker_rejected``
    (each write counted as refused); a write now counts as refused only once each of its
    chunks is (``SealedBatch.refused``), so it is ``unconfirmed``."""
    machine = SettledMachine()
    try:
        machine.mode(exactly_once=True, frame_limit=2524, topic_limit=1 << 30)
        machine.send_timeout()
        machine.add_large(seal=True)
        machine.reconnect()
        machine.answer(answers=1)
        machine.corrupted_on_the_way()
        machine.corrupted_on_the_way()
        machine.check_settled()
        assert machine.outcomes.reason == {machine.sent[0]: reasons.UNCONFIRMED}
        assert machine.broker.stored[machine.sent[0]] == 1
    finally:
        ProducerIdsMachine.teardown(machine)  # without the settled check it would repeat
