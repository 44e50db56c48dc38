"""The one admission path for every message, sans-IO.

:meth:`Intake.admit` runs once per datagram and once per stream record, with
the same steps in the same order: validate, find the topic, check its size and
rate limits, ask the spool policy for memory (or disk), route, append to the
partition's open batch.  Each step ends in the ledger: accepted, spilled or
discarded with a reason.  A stream record that finds no memory is not counted
at all: the stream edge offers it again later (backpressure, never the spool).

With the compiled intake (``native``), :attr:`Intake.admit` is a C function
that takes the common case itself (a valid message for a known, routed topic,
within its limits, with memory to spare) and hands everything else, whole and
before any side effect, to :meth:`Intake.admit_py`, the reference.  It reads
only the state it owns (each topic's ``TopicState``, each partition's
``PartitionState``, which the Python side keeps current) and calls back only
through what it is constructed with here (``native/_intake.pyi``).

Work that needs I/O or a clock (a new topic's partition count, linger timers,
writing sealed batches) is written down by the topic registry and the
:class:`~pulsar_bruce.route.appender.Appender`, once per topic or per batch, never
per message, and taken by the edge after each slab and drain
(``TopicManager.collect``): nothing here calls back up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from pulsar_bruce import reasons
from pulsar_bruce.batch.batch_builder import BatchBuilder, encode_key_field
from pulsar_bruce.model.admission import ACCEPT, DATAGRAM, REPLAY, SPILL, STREAM, WAIT, admission
from pulsar_bruce.model.batch import SealedBatch
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import ENTRY_OVERHEAD, Ledger
from pulsar_bruce.native import admitter
from pulsar_bruce.parse.datagram import parse_datagram, pin_delivery_time
from pulsar_bruce.parse.deliver_at import epoch_ms
from pulsar_bruce.route.appender import Appender, prepare
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.spool.journal_records import Recovered
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.records import SpooledBatch

log = logging.getLogger(__name__)


class Admit(Protocol):
    """:meth:`Intake.admit_py`'s signature: what the sockets call per message."""

    def __call__(self, data: bytes, tag: Confirmation | None = None, /) -> bool: ...


class AdmitRecords(Protocol):
    """:meth:`Intake.admit_records_py`'s signature."""

    def __call__(
        self, records: list[bytes], start: int, tag: Confirmation | None, stop_api_key: int, /
    ) -> int: ...


#: A ``stop_api_key`` no record has (ApiKey is an int16): admit the whole run.
NO_STOP = 1 << 16


class Intake:
    """Admits messages into their partitions' batches; replays spooled ones."""

    def __init__(
        self,
        registry: TopicRegistry,
        appender: Appender,
        ledger: Ledger,
        policy: SpoolPolicy,
        outcomes: Outcomes,
        *,
        max_message_bytes: int,
        clock_ms: Callable[[], int] = epoch_ms,
    ):
        self.registry = registry
        self._topic_of = registry.by_bytes.get
        self.appender = appender
        self._place = appender.place
        self.ledger = ledger
        self._accept = ledger.accept
        self.policy = policy
        self.outcomes = outcomes
        #: Now, in epoch ms: where a message's "deliver after" counts from.
        self.clock_ms = clock_ms
        self._max_message_bytes = max_message_bytes
        #: Admit one message (see :meth:`admit_py`): the compiled admitter where it is built.
        self.admit: Admit = self.admit_py
        #: Admit a run of stream records (see :meth:`admit_records_py`), compiled likewise.
        self.admit_records: AdmitRecords = self.admit_records_py
        compiled_admitter = admitter()
        self._admitter = None if compiled_admitter is None else compiled_admitter(
            self.admit_py, registry.states, accepted=self._accepted, headroom=policy.room,
            seal=appender.seal, opened=appender.opened, tag_last=BatchBuilder.tag_last,
            encode_key_field=encode_key_field, entry_overhead=ENTRY_OVERHEAD,
            max_message_bytes=max_message_bytes,
        )  # fmt: skip
        if self._admitter is not None:
            self.admit, self.admit_records = self._admitter.admit, self._admitter.admit_records

    @property
    def max_message_bytes(self) -> int:
        """The largest message any topic takes (the socket reader's buffer size)."""
        return self._max_message_bytes

    @max_message_bytes.setter
    def max_message_bytes(self, limit: int) -> None:
        self._max_message_bytes = limit
        if self._admitter is not None:
            self._admitter.max_message_bytes = limit

    @property
    def admitted_here(self) -> int:
        """Messages the compiled admitter took without :meth:`admit_py` (for tests and
        profiles; 0 with the pure-Python intake)."""
        return 0 if self._admitter is None else self._admitter.admitted_here

    # -- what the compiled admitter calls back (once per call or per batch, not per message)

    def _accepted(self, count: int, charge: int, tag: Confirmation | None) -> None:
        """``count`` messages of ``charge`` bytes in all, tagged ``tag``, were admitted."""
        self.ledger.accept_many(count, charge)
        if tag is not None:
            tag.outstanding += count

    # -- the hot path -------------------------------------------------------------

    def admit_py(self, data: bytes, tag: Confirmation | None = None, /) -> bool:
        """Take one message: a datagram, or a stream record ``tag``-ged with its confirmation.

        Returns False, having counted nothing, only for a stream record when
        memory cannot take it now; every other message is counted once, as
        accepted, spilled or discarded.
        """
        if len(data) > self._max_message_bytes:
            return self.refuse_message(reasons.TOO_LARGE, data, tag)
        parsed = parse_datagram(data)
        if isinstance(parsed, str):
            return self.refuse_message(parsed, data, tag)
        topic_bytes, partition_key, timestamp, key, value_offset, fields = parsed
        topic = self._topic_of(topic_bytes) or self.registry.add(topic_bytes)
        if topic is None:
            return self.refuse_message(reasons.BAD_TOPIC, data, tag, topic)
        key_field, partition_key, charge = prepare(
            topic, partition_key, key, fields, len(data) - value_offset, self.clock_ms
        )
        state, ledger, policy = topic.state, self.ledger, self.policy
        verdict = admission(
            state, len(data), charge, policy.memory_limit - ledger.buffered_bytes,
            policy.buffer_max_bytes, DATAGRAM if tag is None else STREAM,
        )  # fmt: skip
        if verdict == ACCEPT:
            budget = state.rate_budget
            self._accept(charge)
            if tag is not None:
                tag.outstanding += 1
            producers = topic.producers
            if producers:  # Appender.place's routing, inlined: once per message
                into = producers[state.choose(partition_key)]
                self.appender.append(into, key_field, timestamp, data, value_offset, charge, tag)
            else:  # it waits for the partition count
                self._place(
                    topic, key_field, timestamp, data, value_offset, partition_key, charge, tag
                )
        elif verdict == WAIT:
            return False  # backpressure: the stream edge offers it again later
        elif verdict == SPILL and policy.hold(
            pin_delivery_time(data, key_field) if key_field else data
        ):
            budget = state.rate_budget
            ledger.spill()
        else:
            return self.refuse_message(
                reasons.BUFFER_FULL if verdict == SPILL else verdict, data, tag, topic
            )
        if budget is not None:
            state.rate_budget = budget - 1
        return True

    def admit_datagrams(self, datagrams: list[bytes]) -> None:
        """Admit datagrams in order (a slab from the receive thread): one call into the
        compiled intake for all of them, which reads the limits and tells the ledger once."""
        self.admit_records(datagrams, 0, None, NO_STOP)  # a datagram is never refused: all

    def admit_records_py(
        self, records: list[bytes], start: int, tag: Confirmation | None, stop_api_key: int, /
    ) -> int:
        """Admit ``records[start:]``, each tagged ``tag`` (see :func:`admit_each`)."""
        return admit_each(self.admit_py, records, start, tag, stop_api_key)

    def refuse_record(
        self, reason: str, head: bytes, size: int, tag: Confirmation | None, /
    ) -> None:
        """A stream record refused as it arrived, never held whole (``head``: its first
        bytes, ``size``: all of it): counted once, told to its sender through ``tag``."""
        self.refuse_message(reason, head, tag, size=size)

    def refuse_message(
        self,
        reason: str,
        data: bytes,
        confirmation: Confirmation | None,
        topic: Topic | None = None,
        *,
        size: int | None = None,
    ) -> bool:
        """A message refused at the door: counted, sampled, told to its stream client
        (``size``: the whole record's, when ``data`` is only its start)."""
        self.ledger.reject(reason, topic.stats if topic is not None else None)
        if confirmation is not None:
            confirmation.discard(reason)
        self.outcomes.refused(reason, data, sample=topic is None, size=size)
        return True

    # -- the spool (Replayer) ----------------------------------------------------------------

    def replay_datagram(self, data: bytes, *, previous_run: bool) -> None:
        """A datagram back from the spool, into memory whatever the policy says now.

        One spooled by this run is already counted (received, buffered); one from
        an earlier run is received now.  The rate limit was applied when it came in.
        """
        ledger = self.ledger
        parsed = parse_datagram(data)
        topic = None if isinstance(parsed, str) else self.registry.lookup(parsed[0])
        if isinstance(parsed, str) or topic is None:
            reason = parsed if isinstance(parsed, str) else reasons.BAD_TOPIC
            if previous_run:
                ledger.reject(reason)
            else:
                ledger.discard_spilled(reason, 1)
            self.outcomes.refused(reason, data, sample=True)
            return
        _, partition_key, timestamp, key, value_offset, fields = parsed
        key_field, partition_key, charge = prepare(
            topic, partition_key, key, fields, len(data) - value_offset, self.clock_ms
        )
        if previous_run:
            ledger.readmit(1, charge)
        else:
            ledger.unspill(charge)
        # Into memory whatever room it has: the memory check was made when it came in.
        verdict = admission(topic.state, len(data), charge, charge, charge, REPLAY)
        if verdict != ACCEPT:  # the topic's limit was lowered meanwhile
            ledger.discard(verdict, 1, charge, topic.stats)
            self.outcomes.refused(verdict, data, sample=False)
            return
        self._place(topic, key_field, timestamp, data, value_offset, partition_key, charge, None)

    def replay_journal(self, recovered: Recovered) -> None:
        """What a crashed run's journal still owed: received (again) now, in its order."""
        for batch in recovered.batches:
            self.replay_batch(batch)
        for datagram in recovered.datagrams:
            self.replay_datagram(datagram, previous_run=True)
        if recovered.lost_messages:
            self.ledger.lost_in_spool(0, recovered.lost_messages)
        if recovered.messages or recovered.lost_messages:
            sent = sum(batch.count for batch in recovered.batches if batch.sequence_id >= 0)
            log.warning(
                "journal: %d messages read but not acknowledged before the last stop are "
                "sent again (%d of them had been sent: possible duplicates, which broker "
                "deduplication drops); %d lost to damage",
                recovered.messages,
                sent,
                recovered.lost_messages,
            )

    def replay_batch(self, spooled: SpooledBatch) -> None:
        """A batch an earlier run wrote to the spool at shutdown: received (again) now."""
        topic = self.registry.lookup(spooled.topic.encode())
        charge = len(spooled.entries)
        if topic is None:
            self.ledger.readmit(spooled.count, charge)
            self.ledger.discard(reasons.BAD_TOPIC, spooled.count, charge, None)
            return
        kept = spooled.producer_name and spooled.sequence_id >= 0
        # Sent before: it offers its producer name and sequence ids again; the queue decides
        # whether it keeps them (``BatchQueue.replay``).
        batch = SealedBatch(
            count=spooled.count,
            payload=spooled.entries,
            buffer_bytes=charge,
            sequence_id=spooled.sequence_id if kept else -1,
            producer_name=spooled.producer_name if kept else "",
        )
        # Sent before, or refused after a write that may be stored: new ids cannot be
        # dropped as duplicates of that copy.
        batch.stored_before = spooled.stored_before
        self.ledger.readmit(spooled.count, charge)
        if spooled.sequence_id >= 0 or batch.stored_before:  # the broker may have it already
            self.ledger.possible_duplicate(spooled.count)
        if topic.producers:
            self.appender.queue_sealed(topic, spooled.partition, batch)
        else:
            topic.wait_sealed(spooled.partition, batch)


def admit_each(
    admit: Admit, records: list[bytes], start: int, tag: Confirmation | None, stop_api_key: int
) -> int:
    """Admit ``records[start:]`` in order until one whose ApiKey is ``stop_api_key`` (the
    stream's flush request, which the stream edge answers) or one refused for
    backpressure; returns its index, or ``len(records)`` when all were admitted."""
    for index in range(start, len(records)):
        record = records[index]
        if len(record) >= 6 and int.from_bytes(record[4:6], signed=True) == stop_api_key:
            return index
        if not admit(record, tag):
            return index
    return len(records)
