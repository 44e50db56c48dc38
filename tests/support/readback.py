"""Failure scenarios' tools: a paced sender, the official client as the control, read-back.

A scenario sends unique values (a counter) at a steady rate while something
fails, then reads every partition back with the official client: the multiset
read back against the values sent says what was lost and what was stored twice.
Reading goes on past the expected count until the topic has been quiet for a
while, so a second copy shows.  The same scenario runs with the daemon and with
the official Python client as the producer (:class:`ClientSender`, the control).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol


class Sends(Protocol):
    def send(self, topic: str, value: bytes, *, partition_key: int | None = None) -> Any: ...


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def value(prefix: str, i: int) -> bytes:
    return b"%s-%07d" % (prefix.encode(), i)


class SteadySender(threading.Thread):
    """Sends ``value(prefix, i)`` for i in ``range(count)`` to ``topic`` at ``rate`` per second
    from a thread of its own, recording what the sender took; stops at the first error (the
    daemon went away) or when told to.  ``keyed``: PartitionKey ``i`` with each message."""

    def __init__(
        self,
        open_sender: Callable[[], AbstractContextManager[Sends]],
        topic: str,
        prefix: str,
        count: int,
        rate: float,
        keyed: bool = False,
    ):
        super().__init__(daemon=True, name=f"sender-{prefix}")
        self.open_sender = open_sender
        self.topic = topic
        self.prefix = prefix
        self.count = count
        self.rate = rate
        self.keyed = keyed
        self.sent: list[bytes] = []
        self.error: BaseException | None = None
        self.stop_sending = threading.Event()
        #: The sender it opened (to ask it afterwards, e.g. a :class:`ClientSender`'s failures).
        self.opened: Sends | None = None

    def run(self) -> None:
        start = time.monotonic()
        try:
            with self.open_sender() as sender:
                self.opened = sender
                for i in range(self.count):
                    delay = start + i / self.rate - time.monotonic()
                    # pacing, not synchronisation: the stop event ends the wait early
                    if delay > 0 and self.stop_sending.wait(delay):
                        return
                    if self.stop_sending.is_set():
                        return
                    data = value(self.prefix, i)
                    if self.keyed:
                        sender.send(self.topic, data, partition_key=i)
                    else:
                        sender.send(self.topic, data)
                    self.sent.append(data)
        except Exception as exc:  # the sends that succeeded are the sent
            self.error = exc

    def at_least(self, n: int) -> Callable[[], bool]:
        return lambda: len(self.sent) >= n or not self.is_alive()

    def finish(self, timeout: float) -> list[bytes]:
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} still sending after {timeout:.0f} s"
        return list(self.sent)


class ClientSender:
    """The control: the official Python client as an application would use it for speed
    (one producer per topic, ``send_async`` without a callback of interest, batching on,
    the client's defaults otherwise: its 30 s send timeout included)."""

    def __init__(self, service_url: str):
        import pulsar

        self._pulsar = pulsar
        self.client = pulsar.Client(
            service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        self.producers: dict[str, Any] = {}
        self.failed = 0
        self._lock = threading.Lock()

    def _done(self, result: Any, _message_id: Any) -> None:
        if result != self._pulsar.Result.Ok:
            with self._lock:
                self.failed += 1

    def send(self, topic: str, value: bytes, *, partition_key: int | None = None) -> None:
        producer = self.producers.get(topic)
        if producer is None:
            producer = self.client.create_producer(topic, block_if_queue_full=True)
            self.producers[topic] = producer
        key = None if partition_key is None else str(partition_key)
        if key is None:
            producer.send_async(value, self._done)
        else:
            producer.send_async(value, self._done, partition_key=key)

    def close(self) -> None:
        for producer in self.producers.values():
            with contextlib.suppress(Exception):  # a failed flush: the read-back tells
                producer.flush()
        self.client.close()


@contextmanager
def client_sender(service_url: str) -> Iterator[ClientSender]:
    sender = ClientSender(service_url)
    try:
        yield sender
    finally:
        sender.close()


class ReadBack(Counter[bytes]):
    """Each value read back, how many times; ``copies``: where each copy was stored;
    ``partitions``: the partition each value was read from (the last copy's)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: dict[bytes, list[str]] = {}
        self.partitions: dict[bytes, int] = {}

    def only(self, prefix: bytes) -> ReadBack:
        """The values that start with ``prefix`` (one producer's, when several share a topic)."""
        part = ReadBack()
        for data, count in self.items():
            if data.startswith(prefix):
                part[data] = count
                part.copies[data] = self.copies[data]
                part.partitions[data] = self.partitions[data]
        return part


def partition_of(topic_name: str) -> int:
    """``...-partition-3`` -> 3; -1 for a topic that is not partitioned."""
    head, _, tail = topic_name.rpartition("-partition-")
    return int(tail) if head and tail.isdigit() else -1


def read_back(
    service_url: str, topic: str, expected: int, timeout: float = 60.0, quiet: float = 3.0
) -> ReadBack:
    """Every value on ``topic`` from the beginning, with the official client: reads until
    ``expected`` messages have arrived (or ``timeout``), then on until nothing more came
    for ``quiet`` seconds, so a value stored twice is read twice."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(
            topic,
            f"read-back-{time.monotonic_ns()}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        values = ReadBack()
        received = 0
        deadline = time.monotonic() + timeout
        quiet_until = float("inf")
        while True:
            now = time.monotonic()
            end = min(deadline + quiet, quiet_until) if received >= expected else deadline
            if now >= end:
                return values
            try:
                message = consumer.receive(max(1, min(int((end - now) * 1000), 1000)))
            except pulsar.Timeout:
                continue
            data = message.data()
            values[data] += 1
            values.partitions[data] = partition_of(message.topic_name())
            values.copies.setdefault(data, []).append(
                f"{message.topic_name().rsplit('-', 1)[-1]} id {message.message_id()} "
                f"by {message.producer_name()} at {message.publish_timestamp()}"
            )
            received += 1
            consumer.acknowledge(message)
            if received >= expected:
                quiet_until = time.monotonic() + quiet
    finally:
        client.close()


@dataclass(frozen=True)
class Outcome:
    """What a scenario's read-back says of the values sent."""

    sent: int
    lost: list[bytes]
    twice: list[bytes]
    unknown: list[bytes]

    @classmethod
    def of(cls, read: Counter[bytes], sent: list[bytes]) -> Outcome:
        assert len(set(sent)) == len(sent), "the test sent a value twice"
        expected = Counter(sent)
        return cls(
            sent=len(sent),
            lost=sorted(expected - read),
            twice=sorted(v for v, n in read.items() if n > 1),
            unknown=sorted(set(read) - set(expected)),
        )

    def summary(self) -> str:
        return f"sent {self.sent}, lost {len(self.lost)}, stored twice {len(self.twice)}"


def assert_exactly_once(
    read: ReadBack, sent: list[bytes], context: Callable[[], str] = str
) -> None:
    """The multiset read back is the set sent: no value missing, none twice, none unknown."""
    outcome = Outcome.of(read, sent)
    assert not outcome.lost and not outcome.twice and not outcome.unknown, (
        f"sent {len(sent)}, read {sum(read.values())}: {len(outcome.lost)} lost "
        f"{outcome.lost[:10]}, {len(outcome.twice)} stored twice {outcome.twice[:10]}, "
        f"{len(outcome.unknown)} unknown {outcome.unknown[:10]}\n"
        + "".join(f"  {v!r}: {read.copies[v]}\n" for v in outcome.twice[:20])
        + context()
    )
