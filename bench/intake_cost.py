"""Per-message cost of the daemon's Python intake alone: no sockets, no broker.

One 100 B AnyPartition datagram admitted 300,000 times into a topic with four
ready partitions (sealed batches are dropped), best of five runs::

    python -m bench.intake_cost

It isolates what ``Intake.admit`` costs (parse, topic, limits, route, append), the
part of the daemon's CPU per datagram that is not the kernel's ``recv``.
"""

from __future__ import annotations

import time

from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.topics import TopicRegistry
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition

MESSAGES = 300_000
ROUNDS = 5


class _DropSealed:
    def batch_opened(self, producer: PartitionProducer) -> None:
        pass

    def batch_sealed(self, producer: PartitionProducer) -> None:
        producer.pending.clear()


def main() -> None:
    ledger = Ledger()
    registry = TopicRegistry(lambda topic: None)
    appender = Appender(_DropSealed())
    intake = Intake(
        registry, appender, ledger, SpoolPolicy(ledger, 1 << 40), Outcomes(ledger),
        max_message_bytes=1 << 20,
    )  # fmt: skip
    datagram = encode_any_partition("t", b"x" * 100)
    intake.admit(datagram)
    topic = registry.by_name["persistent://public/default/t"]
    producers = [PartitionProducer(f"t-partition-{i}", i, i + 1, BatchPolicy()) for i in range(4)]
    for producer in producers:
        producer.ready = True
    topic.producers.extend(producers)
    topic.partitioned = True
    appender.route_waiting(topic)
    admit = intake.admit
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(MESSAGES):
            admit(datagram)
        best = min(best, (time.perf_counter() - started) / MESSAGES)
    print(f"Intake.admit: {best * 1e9:.0f} ns per 100 B datagram (best of {ROUNDS})")


if __name__ == "__main__":
    main()
