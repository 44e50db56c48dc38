"""Stream records a sender numbered itself, through the whole sans-IO sequenced path, traced.

``python -m tests.support.sequenced_trace`` reads workloads, one JSON object a line
(``records``: hex stream records; ``memory``: the buffer cap; ``budget``: the rate-limited
topic's budget per interval), and writes one JSON trace a line: where each
``admit_records`` call stopped, every refusal, every sealed batch (broker topic, first
sequence id, count, payload) and the Send frames' digests, and the ledger.  Whenever a
record must wait, the edge's relief comes before it is offered again: every batch acked,
the rate budget refilled, the waiting topic's partitions attached.  The differential
test runs one worker per intake (``PULSAR_BRUCE_INTAKE``) and compares the traces.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from pulsar_bruce.input.stream_session import API_KEY_FLUSH_REQUEST
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.model.vocabulary import KeyRouting
from pulsar_bruce.native import INTAKE
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.key_hash import HASHERS
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.sequenced import SequencedSender
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.spool.policy import SpoolPolicy

from tests.support.intake_trace import RecordedOutcomes

#: Topics the workloads address: round-robin over three partitions, key routing, a size
#: and rate limit, and one whose partition count is not known until the first relief.
TOPICS = ("plain", "keyed", "limited", "waiting")
POLICY = BatchPolicy(max_messages=5, max_bytes=1024)
PUBLISH_TIME_MS = 1_700_000_000_000


class Edge:
    """The topic manager's part: batches taken from the appender, sequenced producers."""

    def __init__(self, trace: dict[str, Any], appender: Appender):
        self.trace = trace
        self.appender = appender
        self.ids = 0

    def take(self) -> None:
        """What the appender wrote down since the last call: sealed batches are written."""
        opened, sealed = self.appender.take_batches()
        self.trace["opened"] += len(opened)
        for producer in sealed:
            self.write(producer)

    def write(self, producer: PartitionProducer) -> None:
        for batch in list(producer.pending)[producer.in_flight :]:
            self.trace["batches"].append(
                [producer.topic, batch.sequence_id, batch.count, batch.payload.hex()]
            )
        out = producer.frames_to_send(publish_time_ms=PUBLISH_TIME_MS)
        self.trace["frames"] += [hashlib.sha256(frame).hexdigest() for frame in out.frames]

    def open_sequenced(
        self, topic: Topic, partition: int, name: str, first_sequence_id: int
    ) -> PartitionProducer:
        self.ids += 1
        producer = PartitionProducer(f"{topic.name}/{partition}", partition, self.ids, POLICY)
        producer.publish_as(name, first_sequence_id)
        producer.on_registered(name, -1)
        topic.add_sequenced(producer)
        return producer

    def retire_sequenced(self, producers: list[PartitionProducer]) -> None:
        self.trace["retired"] = len(producers)


def attach(registry: TopicRegistry, name: str, count: int) -> None:
    topic = registry.lookup(name.encode())
    assert topic is not None
    producers = (PartitionProducer(f"{name}-{i}", i, 1000 + i, POLICY) for i in range(count))
    topic.attach(producers, partitioned=True)


def relieve(registry: TopicRegistry, ledger: Ledger, edge: Edge, budget: int) -> None:
    """What the edge does while a record waits: receipts, a new interval, a lookup."""
    edge.take()
    for topic in registry:
        for producer in topic.sequenced:
            if producer.seal() is not None:
                edge.write(producer)
            for batch in producer.take_all():
                ledger.ack(topic.stats, batch.count, batch.buffer_bytes)
        if topic.rate_budget is not None:
            topic.rate_budget = budget
    waiting = registry.lookup(b"waiting")
    if waiting is not None and not waiting.producers:
        attach(registry, "waiting", 2)


def run(workload: dict[str, Any]) -> dict[str, Any]:
    trace: dict[str, Any] = {"stops": [], "rejects": [], "batches": [], "frames": [], "opened": 0}
    ledger = Ledger()
    registry = TopicRegistry()
    appender = Appender()
    edge = Edge(trace, appender)
    outcomes = RecordedOutcomes(ledger, trace["rejects"])
    intake = Intake(
        registry, appender, ledger, SpoolPolicy(ledger, workload["memory"]), outcomes,
        max_message_bytes=2048,
    )  # fmt: skip
    attach(registry, "plain", 3)
    attach(registry, "keyed", 4)
    attach(registry, "limited", 2)
    registry.by_name["persistent://public/default/keyed"].key_hash = HASHERS[KeyRouting.MURMUR3]
    limited = registry.by_name["persistent://public/default/limited"]
    limited.max_message_bytes, limited.rate_budget = 300, workload["budget"]
    registry.lookup(b"waiting")
    sender = SequencedSender(intake, edge, "job-7", 3 << 32)
    records = [bytes.fromhex(record) for record in workload["records"]]
    stream, start, stuck = Confirmation(lambda: None), 0, -1
    while start < len(records):
        stop = sender.admit_records(records, start, stream, API_KEY_FLUSH_REQUEST)
        edge.take()
        trace["stops"].append(stop)
        if stop < len(records) and records[stop][4:6] != API_KEY_FLUSH_REQUEST.to_bytes(2, "big"):
            if stop == stuck:  # waits even after relief: say so, and go on past it
                trace["stops"].append("stuck")
                stop += 1
            else:
                relieve(registry, ledger, edge, workload["budget"])
                stuck, start = stop, stop
                continue
        start = stop + 1
    relieve(registry, ledger, edge, workload["budget"])
    sender.end()
    trace["ledger"] = [ledger.received, ledger.acked, dict(ledger.discarded),
                       ledger.buffered_bytes, ledger.buffered_messages]  # fmt: skip
    trace["stream"] = [stream.outstanding, stream.discarded]
    trace["position"] = sender.position
    return trace


def main() -> None:
    """One trace per workload line, until stdin ends."""
    print(json.dumps({"intake": INTAKE}), flush=True)
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
