"""Throw mutated datagrams, interleaved with valid ones, at a running daemon; check the outcome.

The daemon runs against a real broker with ``--max-message-bytes`` small enough
that oversized datagrams are cheap.  Datagrams go out on one connected UNIX
datagram socket (a raw one: the client library would refuse most of them), and
each is classified beforehand (:mod:`fuzz.datagrams`).  At the end:

- the daemon is still running and logged no traceback;
- ``received`` == datagrams sent, ``buffered`` == 0, the accounting identity holds;
- ``acked`` == the valid ones, per topic, and every discard reason counts exactly
  the datagrams classified with it;
- the base topic reads back exactly the expected values (every valid one, once).
"""

from __future__ import annotations

import re
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.chaos.tools import Outcome, nonzero, read_values, unique_topic
from bench.fuzz.datagrams import OK, Generator

StartDaemon = Callable[..., Any]


def fuzz(
    start_daemon: StartDaemon,
    service_url: str,
    *,
    mutants: int,
    seed: int,
    max_message_bytes: int = 4096,
    max_extra_topics: int = 10,
    timeout: float = 60.0,
) -> Outcome:
    out = Outcome(f"fuzz: {mutants:,} mutants + {mutants:,} valid datagrams, seed {seed}")
    daemon = start_daemon(
        service_url, "--max-message-bytes", str(max_message_bytes), "--batch-max-delay-ms", "5"
    )
    base = unique_topic("fuzz")
    generator = Generator(seed, base, max_message_bytes, max_extra_topics)
    outcomes: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    acks_by_topic: Counter[str] = Counter()
    base_values: Counter[bytes] = Counter()
    sent = 0
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sock.settimeout(timeout)
        sock.connect(daemon.socket_path)
        for datagram in generator(mutants):
            sock.send(datagram.data)
            sent += 1
            outcomes[datagram.outcome] += 1
            kinds[datagram.kind, datagram.outcome] += 1
            if datagram.outcome == OK:
                assert datagram.topic is not None and datagram.value is not None
                acks_by_topic[datagram.topic] += 1
                if datagram.topic == generator.base_name:
                    base_values[datagram.value] += 1
    send_s = time.monotonic() - started
    counters = daemon.wait_settled(sent, timeout)
    settle_s = time.monotonic() - started
    alive = daemon.process.poll() is None
    metrics = daemon.metrics()
    topic_acks = {
        topic: int(metrics.get(f'pulsar_bruce_topic_acked_total{{topic="{topic}"}}', 0))
        for topic in acks_by_topic
    }
    read_started = time.monotonic()
    read = read_values(service_url, base, sum(base_values.values()), timeout)
    got = Counter(read.values)
    read_s = time.monotonic() - read_started
    missing = base_values - got
    extra = got - base_values
    never_sent = sum(n for value, n in extra.items() if value not in base_values)
    notes = []
    if read.received > got.total():
        notes.append(f"{read.received:,} received incl. redeliveries")
    if read.subscriptions > 1:
        notes.append(f"{read.subscriptions} subscriptions (dispatch stalled)")
    reread = f" ({'; '.join(notes)})" if notes else ""
    log = daemon.log()
    reconnects = len(re.findall(r"closing connection|reconnecting|not connected", log))
    expected_discards = {reason: n for reason, n in sorted(outcomes.items()) if reason != OK}
    discards = nonzero(counters.discarded)
    by_kind: Counter[str] = Counter()
    for (kind, _), n in kinds.items():
        by_kind[kind] += n
    valid_mutants = outcomes[OK] - kinds["valid", OK]

    out.figures.update(
        {
            "sent": f"{sent:,} datagrams in {send_s:.1f} s ({sent / send_s:,.0f}/s)",
            "expected": f"{outcomes[OK]:,} acked ({valid_mutants:,} of them valid mutants), "
            f"discards {expected_discards}",
            "received": f"{counters.received:,}",
            "acked": f"{counters.acked:,}",
            "discarded": discards,
            "buffered": counters.buffered,
            "identity": "holds" if counters.identity_holds() else "BROKEN",
            "topics": f"{len(acks_by_topic)} ({len(generator.extra_topics)} created by "
            f"mutants; {generator.redrawn:,} mutants redrawn to stay within them)",
            "read back (base topic)": f"{got.total():,} values in {read_s:.1f} s, "
            f"{missing.total()} missing, {extra.total() - never_sent} extra copies, "
            f"{never_sent} never sent{reread}",
            "possible_duplicates": counters.possible_duplicates,
            "log: reconnects": reconnects,
            "daemon": f"{'running' if alive else 'EXITED'}, settled {settle_s:.1f} s after "
            "the first datagram",
            "by kind": ", ".join(f"{kind} {n:,}" for kind, n in sorted(by_kind.items())),
        }
    )
    out.expect(alive, f"daemon exited with {daemon.process.returncode}")
    out.expect("Traceback" not in log, "traceback in the daemon's log")
    out.expect(counters.received == sent, f"received {counters.received}, sent {sent}")
    out.expect(counters.buffered == 0, f"{counters.buffered} still buffered")
    out.expect(counters.identity_holds(), f"accounting identity broken: {counters}")
    out.expect(counters.acked == outcomes[OK], f"acked {counters.acked}, expected {outcomes[OK]}")
    out.expect(discards == expected_discards, f"discards {discards}, expected {expected_discards}")
    out.expect(
        topic_acks == dict(acks_by_topic),
        f"acked per topic {topic_acks}, expected {dict(acks_by_topic)}",
    )
    out.expect(not missing, f"{missing.total()} valid values never read back")
    out.expect(not extra, f"{extra.total()} values read back that were not expected")
    return out
