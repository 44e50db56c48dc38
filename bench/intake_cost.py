"""Per-message cost of the daemon's intake alone: no sockets, no broker.

One 100 B AnyPartition datagram admitted 300,000 times into a topic with four
ready partitions (sealed batches are dropped), best of five runs, once per
intake (each in a fresh interpreter, ``PULSAR_BRUCE_INTAKE``): one ``Intake.admit``
call each, and in slabs of 64 through ``Intake.admit_datagrams`` (what the receive
thread's slabs take)::

    python -m bench.intake_cost

It isolates what ``Intake.admit`` costs (parse, topic, limits, route, append), the
part of the daemon's CPU per datagram that is not the kernel's ``recv``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.producer.partition_producer import BatchPolicy, PartitionProducer
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.spool.policy import SpoolPolicy
from to_pulsar.encoding import encode_any_partition

MESSAGES = 300_000
ROUNDS = 5


def _drop_sealed(appender: Appender) -> None:
    """What the edge would write: the sealed batches, dropped (once per chunk of messages)."""
    for producer in appender.take_batches()[1]:
        producer.pending.clear()


SLAB = 64
#: Messages (and slabs) between two takes of the sealed batches (the edge's drain).
CHUNK, SLABS_A_CHUNK = 1000, 16


def measure() -> tuple[float, float]:
    """Seconds per admitted datagram with the intake this interpreter runs: one call
    each, and a slab per call."""
    ledger = Ledger()
    registry = TopicRegistry()
    appender = Appender()
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
    topic.attach(producers, partitioned=True)
    appender.route_waiting(topic)
    admit, admit_slab, slab = intake.admit, intake.admit_datagrams, [datagram] * SLAB
    best = best_slab = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(MESSAGES // CHUNK):
            for _ in range(CHUNK):
                admit(datagram)
            _drop_sealed(appender)
        best = min(best, (time.perf_counter() - started) / (MESSAGES // CHUNK * CHUNK))
        started = time.perf_counter()
        for _ in range(MESSAGES // SLAB // SLABS_A_CHUNK):
            for _ in range(SLABS_A_CHUNK):
                admit_slab(slab)
            _drop_sealed(appender)
        slabbed = MESSAGES // SLAB // SLABS_A_CHUNK * SLABS_A_CHUNK * SLAB
        best_slab = min(best_slab, (time.perf_counter() - started) / slabbed)
    return best, best_slab


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(" ".join(f"{cost * 1e9:.0f}" for cost in measure()))
        return
    costs: dict[str, list[int]] = {}
    for intake in ("compiled", "python"):
        env = {**os.environ, "PULSAR_BRUCE_INTAKE": intake}
        run = subprocess.run(
            [sys.executable, "-m", "bench.intake_cost", "--one"], env=env, capture_output=True,
            text=True,
        )  # fmt: skip
        if run.returncode:
            print(f"{intake}: not available ({run.stderr.strip().splitlines()[-1]})")
            continue
        costs[intake] = [int(field) for field in run.stdout.split()]
        single, slab = costs[intake]
        print(
            f"{intake}: Intake.admit {single} ns, Intake.admit_datagrams ({SLAB} a call) "
            f"{slab} ns per 100 B datagram (best of {ROUNDS})"
        )
    if len(costs) == 2:
        ratios = [p / c for p, c in zip(costs["python"], costs["compiled"], strict=True)]
        print(f"python / compiled: {ratios[0]:.1f} x one a call, {ratios[1]:.1f} x a slab a call")


if __name__ == "__main__":
    main()
