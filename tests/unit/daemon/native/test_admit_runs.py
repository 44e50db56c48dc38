"""A run of messages in one call (``Intake.admit_datagrams``, ``admit_records``).

The compiled intake reads the limits once per call and tells the ledger its
acceptances once per call (``Ledger.accept_many``), before any Python code runs and
by the call's end; the pure-Python intake counts each message as it goes. Either
way the ledger is the same when the call returns, and memory is checked against
what is buffered including the acceptances not yet told.
"""

from __future__ import annotations

import pytest
from pulsar_bruce import reasons
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.native import compiled
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition

VALUE = b"v" * 100
#: What one VALUE message is charged: value + ENTRY_OVERHEAD (no key).
CHARGE = 100 + 21


class CountingLedger(Ledger):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def accept(self, charge: int) -> None:
        self.calls.append(("accept", 1))
        super().accept(charge)

    def accept_many(self, count: int, charge: int) -> None:
        self.calls.append(("accept_many", count))
        super().accept_many(count, charge)


class _Events(Appender):
    """An appender that notes the ledger each time the compiled admitter calls it."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger
        self.seen_received: list[int] = []

    def opened(self, producer: PartitionProducer) -> None:
        self.seen_received.append(self.ledger.received)  # Python code sees a current ledger
        super().opened(producer)

    def seal(self, producer: PartitionProducer) -> None:
        self.seen_received.append(self.ledger.received)
        super().seal(producer)


def _intake(memory: int = 1 << 30, max_messages: int = 1000) -> tuple[Intake, _Events]:
    ledger = CountingLedger()
    events = _Events(ledger)
    registry = TopicRegistry()
    intake = Intake(
        registry, events, ledger, SpoolPolicy(ledger, memory), Outcomes(ledger),
        max_message_bytes=1 << 20,
    )  # fmt: skip
    topic = registry.lookup(b"t")
    assert topic is not None
    producer = PartitionProducer("t", 0, 1, BatchPolicy(max_messages=max_messages))
    producer.ready = True
    topic.attach([producer])
    return intake, events


def _identity(ledger: Ledger) -> int:
    return ledger.received - ledger.acked - sum(ledger.discarded.values()) - (
        ledger.buffered_messages
    )


def test_a_slab_is_counted_by_the_end_of_its_call() -> None:
    intake, _ = _intake()
    slab = [encode_any_partition("t", VALUE)] * 40
    slab[7] = b"\x00\x01"  # malformed
    slab[30] = b""
    intake.admit_datagrams(slab)
    ledger = intake.ledger
    assert (ledger.received, ledger.buffered_messages) == (40, 38)
    assert ledger.buffered_bytes == 38 * CHARGE
    assert ledger.discarded[reasons.MALFORMED] == 2
    assert _identity(ledger) == 0


@pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")
def test_the_compiled_intake_tells_the_ledger_once_per_call_and_before_python_runs() -> None:
    intake, events = _intake(max_messages=25)
    intake.admit_datagrams([encode_any_partition("t", VALUE)] * 60)
    ledger = intake.ledger
    assert isinstance(ledger, CountingLedger)
    # Settled before each call-out: batch 1 opened (1), sealed (25), batch 2 opened (26),
    # sealed (50), batch 3 opened (51); the last nine by the end of the call.
    assert events.seen_received == [1, 25, 26, 50, 51]
    assert ledger.calls == [
        ("accept_many", 1), ("accept_many", 24), ("accept_many", 1), ("accept_many", 24),
        ("accept_many", 1), ("accept_many", 9),
    ]  # fmt: skip
    assert (ledger.received, ledger.buffered_bytes) == (60, 60 * CHARGE)


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_memory_counts_the_acceptances_not_yet_told(path: str) -> None:
    if path == "compiled" and compiled is None:
        pytest.skip("the compiled intake is not built")
    intake, _ = _intake(memory=10 * CHARGE)
    if path == "python":
        intake.admit_records = intake.admit_records_py  # type: ignore[method-assign]
    intake.admit_datagrams([encode_any_partition("t", VALUE)] * 14)
    ledger = intake.ledger
    assert (ledger.received, ledger.buffered_messages) == (14, 10)
    assert ledger.buffered_bytes == 10 * CHARGE
    assert ledger.discarded[reasons.BUFFER_FULL] == 4
