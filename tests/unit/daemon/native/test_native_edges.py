"""Edges of the compiled intake found in review: limits beyond int64, the Receiver's
file descriptors before ``__init__`` succeeds, and a receive socket shut under the thread."""

from __future__ import annotations

import os
import socket
import time

import pytest
from pulsar_bruce.config.values import parse_size
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.native import compiled
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled intake is not built")

#: A size the configuration accepts that does not fit in 64 bits.
HUGE = parse_size("10000000000GiB")


def _intake(case: str) -> tuple[Intake, PartitionProducer]:
    ledger = Ledger()
    registry = TopicRegistry()
    memory = HUGE if case == "memory_limit" else 1 << 30
    intake = Intake(
        registry, Appender(), ledger, SpoolPolicy(ledger, memory), Outcomes(ledger),
        max_message_bytes=HUGE if case == "max_message_bytes" else 1 << 20,
    )  # fmt: skip
    topic = registry.lookup(b"t")
    assert topic is not None
    producer = PartitionProducer(
        "t", 0, 1, BatchPolicy(max_bytes=HUGE if case == "batch" else 4096)
    )
    producer.ready = True
    topic.attach([producer])
    if case == "topic_max_message_bytes":
        topic.max_message_bytes = HUGE
    if case == "rate_budget":
        topic.rate_budget = HUGE
    return intake, producer


@pytest.mark.parametrize(
    "case", ["memory_limit", "max_message_bytes", "topic_max_message_bytes", "rate_budget", "batch"]
)
def test_limits_beyond_int64_admit_as_the_python_intake_does(case: str) -> None:
    data = encode_any_partition("t", b"value", b"key")
    results = []
    for compiled_path in (True, False):
        intake, producer = _intake(case)
        admit = intake.admit if compiled_path else intake.admit_py
        assert admit(data) is True
        topic = intake.registry.lookup(b"t")
        assert topic is not None
        results.append((producer.batch.buffer, intake.ledger.buffered_bytes, topic.rate_budget))
    assert results[0] == results[1]


def test_a_receiver_that_was_never_initialised_closes_no_descriptor() -> None:
    assert compiled is not None
    try:
        os.fstat(0)
    except OSError:
        pytest.skip("no descriptor 0 to watch")
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(TypeError):
            compiled.Receiver("not a descriptor", 1024)
        with pytest.raises(ValueError):
            compiled.Receiver(read_end, -1)
        compiled.Receiver.__new__(compiled.Receiver)  # dropped at once, never initialised
        os.fstat(0)  # stdin is still open (fd 0 was closed twice before the fix)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_socket_shut_under_the_thread_ends_it_after_what_was_queued() -> None:
    """Before the fix the thread polled a shut socket forever (POLLIN without data)."""
    assert compiled is not None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver = compiled.Receiver(ours.fileno(), 2048)
    receiver.start()
    try:
        theirs.send(b"queued")
        ours.shutdown(socket.SHUT_RD)
        deadline = time.monotonic() + 10
        while receiver.running and time.monotonic() < deadline:
            time.sleep(0.01)  # polling a condition, with a deadline
        assert receiver.running is False  # ended by itself: the loop reads the socket now
        taken = []
        while (slab := receiver.take()) is not None:
            taken += slab
        if not taken:  # the thread saw the hang-up before the datagram: still queued
            ours.setblocking(False)
            taken.append(ours.recv(2048))
        assert taken == [b"queued"]
    finally:
        receiver.stop()
        ours.close()
        theirs.close()
