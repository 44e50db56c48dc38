"""One deterministic workload through the whole sans-IO intake, printed as a trace.

``python -m tests.support.intake_trace SEED`` admits a few thousand random and
fuzzed datagrams and stream records (three topics: round-robin over four
partitions with one down and one being re-created, key routing with key-based batching and lz4, a
rate limit; bad topics, malformed and oversized messages, a memory limit that
fills) and prints, as JSON, every discard reason in order, every sealed batch
(partition, count, charge, payload bytes, confirmation tag runs), every Send frame its producer
writes, and the ledger.  The differential test runs it once per intake
(``PULSAR_BRUCE_INTAKE``) in a fresh interpreter and compares the output exactly.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from typing import Any

from pulsar_bruce.batch.compression import codec
from pulsar_bruce.input.stream_session import API_KEY_FLUSH_REQUEST, encode_flush_request
from pulsar_bruce.model.confirmation import Confirmation
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.model.vocabulary import KeyRouting
from pulsar_bruce.native import INTAKE
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.key_hash import HASHERS
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition, encode_message_record, encode_partition_key

from tests.support.any_topic import to_any_topic

TOPICS = ("plain", "keyed", "limited")
MEMORY_LIMIT = 16 * 1024


class Recorder:
    """The edge: batches sealed are framed and written down after each call."""

    def __init__(self, trace: dict[str, Any]):
        self.trace = trace

    def take(self, appender: Appender) -> None:
        """What the appender wrote down since the last call (as the topic manager takes it)."""
        opened, sealed = appender.take_batches()
        self.trace["opened"] += len(opened)
        for producer in sealed:
            self.batch_sealed(producer)

    def batch_sealed(self, producer: PartitionProducer) -> None:
        for batch in list(producer.pending)[producer.in_flight :]:
            runs = [[run.tag is not None, run.count] for run in batch.tags or ()]
            self.trace["batches"].append(
                [producer.topic, batch.count, batch.buffer_bytes, batch.payload.hex(), runs]
            )
        out = producer.frames_to_send(publish_time_ms=1_700_000_000_000)
        self.trace["frames"] += [hashlib.sha256(frame).hexdigest() for frame in out.frames]


class RecordedOutcomes(Outcomes):
    """Outcomes that also write each refusal's reason down, in order."""

    def __init__(self, ledger: Ledger, rejects: list[str]):
        super().__init__(ledger)
        self.rejects = rejects

    def refused(self, reason: str, data: bytes, *, sample: bool, size: int | None = None) -> None:
        self.rejects.append(reason)
        super().refused(reason, data, sample=sample, size=size)


def message(rng: random.Random, index: int) -> bytes:
    """A datagram: mostly valid, some bad topics, oversized, truncated or mutated."""
    topic = rng.choice(TOPICS) if rng.random() > 0.03 else "bad topic/" + "x" * rng.randrange(3)
    value = rng.randbytes(rng.choice((0, 1, 10, 100, 100, 300, 300, 5000)))
    key = rng.choice((b"", b"", b"k1", b"k2", b"\xff\xfe", str(index % 7).encode()))
    stamp = rng.choice((0, 0, -5, 1_700_000_000_000 + index, 2**62))
    kind = rng.random()
    if kind < 0.5:
        data = to_any_topic(topic, lambda name: encode_any_partition(name, value, key, stamp))
    elif kind < 0.75:
        pkey = rng.randrange(2**31)
        data = to_any_topic(
            topic, lambda name: encode_partition_key(pkey, name, value, key, stamp)
        )
    else:
        properties = {f"p{i}": "é" * rng.randrange(3) for i in range(rng.randrange(3))}
        partition = rng.choice((None, rng.randrange(2**31)))
        data = to_any_topic(
            topic,
            lambda name: encode_message_record(name, value, key, stamp, partition, properties),
        )
    fuzz = rng.random()
    if fuzz < 0.05:  # truncated
        data = data[: rng.randrange(len(data) + 1)]
    elif fuzz < 0.10:  # a byte flipped
        at = rng.randrange(len(data))
        data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    return data


def run(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    trace: dict[str, Any] = {
        "rejects": [], "batches": [], "frames": [], "opened": 0, "ledger_after_slabs": [],
    }  # fmt: skip
    ledger = Ledger()
    registry = TopicRegistry()
    outcomes = RecordedOutcomes(ledger, trace["rejects"])
    appender, recorder = Appender(), Recorder(trace)
    intake = Intake(
        registry, appender, ledger, SpoolPolicy(ledger, MEMORY_LIMIT), outcomes,
        max_message_bytes=4096,
    )  # fmt: skip
    for name in TOPICS:
        topic = registry.lookup(name.encode())
        assert topic is not None
        key_based = name == "keyed"
        compression, compressor = codec("lz4" if key_based else "none")
        policy = BatchPolicy(max_messages=7, max_bytes=2048, compression=compression,
                             compressor=compressor, key_based=key_based)  # fmt: skip
        producers = [PartitionProducer(f"{name}-partition-{i}", i, i + 1, policy) for i in range(4)]
        for producer in producers:
            producer.on_registered(f"producer-{name}-{producer.partition}", -1)
        if name == "plain":  # one partition down (failover), one being re-created (waited for)
            producers[2].ready = producers[2].available = False
            producers[3].ready = False
        topic.attach(producers, partitioned=True)
        if key_based:
            topic.key_hash = HASHERS[KeyRouting.MURMUR3]
        if name == "limited":
            topic.max_message_bytes = 1024
            topic.rate_budget = 150
    stream = Confirmation(lambda: None)
    for index in range(3000):
        data = message(rng, index)
        if rng.random() < 0.1:  # a stream record: confirmation tags, backpressure
            taken = intake.admit(data, stream)
            trace["rejects"].append("taken" if taken else "backpressure")
        elif rng.random() < 0.1:  # a run of stream records, maybe with a flush request
            run = [data, *(message(rng, index) for _ in range(rng.randrange(5)))]
            if rng.random() < 0.3:
                run.insert(rng.randrange(len(run) + 1), encode_flush_request(index))
            start = 0
            while start < len(run):
                stop = intake.admit_records(run, start, stream, API_KEY_FLUSH_REQUEST)
                trace["rejects"].append(f"records {start}..{stop} of {len(run)}")
                start = stop + 1  # past the flush request (or the record refused for now)
        elif rng.random() < 0.1:  # a slab from the receive thread: one call for all
            intake.admit_datagrams([data, *(message(rng, index) for _ in range(rng.randrange(64)))])
            trace["ledger_after_slabs"].append(
                (ledger.received, ledger.buffered_messages, ledger.buffered_bytes)
            )  # the compiled intake tells the ledger once per call: by its end
        else:
            intake.admit(data)
        recorder.take(appender)
        if index % 400 == 399:  # the broker acks everything sent so far
            for topic in registry:
                for producer in topic.producers:
                    producer.seal()
                    for batch in producer.take_all():
                        ledger.ack(topic.stats, batch.count, batch.buffer_bytes)
    trace["ledger"] = {
        "received": ledger.received, "acked": ledger.acked,
        "discarded": dict(ledger.discarded), "buffered_bytes": ledger.buffered_bytes,
        "buffered_messages": ledger.buffered_messages,
    }  # fmt: skip
    trace["stream"] = [stream.outstanding, stream.discarded]
    admitter = getattr(intake.admit, "__self__", None)  # the compiled admitter, if it runs
    trace["admitted_in_c"] = getattr(admitter, "admitted_here", 0)
    return trace


def main() -> None:
    trace = run(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    trace["intake"] = INTAKE
    json.dump(trace, sys.stdout)


if __name__ == "__main__":
    main()
