"""Building blocks of the chaos scenarios (and the fuzz campaign).

A paced sender thread whose values carry a sequence number, a read-back with the
official client, a broker that accepts connections and never answers, and a few
``/proc`` and log readers.  Nothing here sleeps to synchronise: the sender paces
itself (load shaping), everything else polls a condition against a deadline.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEQ_WIDTH = 10
WARM_UP = b"warm-up"  # what conftest.Daemon.warm_up() sends


def unique_topic(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def full_name(topic: str) -> str:
    return topic if "://" in topic else f"persistent://public/default/{topic}"


def value_for(seq: int, size: int) -> bytes:
    """``seq`` as 10 ASCII digits, padded with dots to ``size`` bytes."""
    head = b"%010d" % seq
    return head + b"." * (size - len(head))


def seq_of(value: bytes) -> int | None:
    head = value[:SEQ_WIDTH]
    if len(head) == SEQ_WIDTH and head.isdigit():
        return int(head)
    return None


# -- the sending side ---------------------------------------------------------------------


class Stream(threading.Thread):
    """Sends ``value_for(0..count-1)`` to ``topic`` with :class:`to_pulsar.Sender`.

    ``rate`` messages per second (0: as fast as the socket takes them); it paces
    itself by sleeping between sends (load shaping).  It stops at the first error
    (kept in :attr:`error`) or on :meth:`stop`.  :attr:`sent` counts the sends
    that returned without an error: datagrams the kernel queued for the daemon.
    """

    def __init__(
        self,
        socket_path: str,
        topic: str,
        count: int,
        rate: float = 0.0,
        value_size: int = 64,
        timeout: float = 5.0,
    ):
        super().__init__(name=f"stream {topic}", daemon=True)
        self.socket_path = socket_path
        self.topic = topic
        self.count = count
        self.rate = rate
        self.value_size = value_size
        self.timeout = timeout
        self.sent = 0
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._stop_requested = threading.Event()

    def stop(self) -> None:
        self._stop_requested.set()

    def run(self) -> None:
        from to_pulsar import Sender

        start = time.monotonic()
        try:
            with Sender(self.socket_path, timeout=self.timeout) as sender:
                send = sender.send
                topic = self.topic
                size = self.value_size
                rate = self.rate
                stop = self._stop_requested
                for seq in range(self.count):
                    send(topic, value_for(seq, size))
                    self.sent = seq + 1
                    if seq % 64 == 63:
                        if stop.is_set():
                            break
                        if rate:
                            ahead = start + (seq + 1) / rate - time.monotonic()
                            if ahead > 0:
                                time.sleep(ahead)
        except BaseException as exc:
            self.error = exc
        finally:
            self.seconds = time.monotonic() - start


# -- the reading side ---------------------------------------------------------------------


@dataclass
class ReadBack:
    """Every message stored in a topic: sequence numbers with multiplicity, and the rest."""

    seqs: Counter[int] = field(default_factory=Counter)
    others: Counter[bytes] = field(default_factory=Counter)
    seconds: float = 0.0
    received: int = 0  # redeliveries of the same message id included
    subscriptions: int = 0

    def how(self) -> str:
        """How the read went, when it was not plain: redeliveries, restarts."""
        notes = []
        if self.received > self.total + sum(self.others.values()):
            notes.append(f"{self.received:,} received incl. redeliveries")
        if self.subscriptions > 1:
            notes.append(f"{self.subscriptions} subscriptions (dispatch stalled)")
        return f" ({'; '.join(notes)})" if notes else ""

    @property
    def total(self) -> int:
        return sum(self.seqs.values())

    @property
    def distinct(self) -> int:
        return len(self.seqs)

    @property
    def duplicates(self) -> int:
        """Copies read beyond the first of each value."""
        return self.total - self.distinct

    def missing(self, expected: range) -> list[int]:
        return [seq for seq in expected if seq not in self.seqs]

    def unexpected(self, expected: range) -> list[int]:
        return sorted(seq for seq in self.seqs if seq not in expected)


@dataclass
class Read:
    """The messages stored in a topic, one value per message id, and how reading went."""

    values: list[bytes]
    received: int  # messages the consumers got, redeliveries included
    subscriptions: int  # > 1: dispatch stalled and the read started over


def read_values(
    service_url: str,
    topic: str,
    expected: int,
    timeout: float = 60.0,
    quiet_s: float = 1.0,
    stall_s: float = 5.0,
) -> Read:
    """Every message of ``topic`` from the beginning, with the official client.

    Messages are told apart by message id (partition, ledger, entry, batch index),
    not by value: with pulsar-lite 0.2.0 a consumer is sometimes sent the same
    message more than once (same id), and sometimes stops receiving from a partition
    (a new subscription then reads everything).  So a message read twice with the
    same id is one stored message, and after ``stall_s`` without a new message
    while fewer than ``expected`` are in, the read starts over on a new subscription
    (merged by id).  Reads until ``expected`` messages and then ``quiet_s`` without
    a new one (so stored duplicates beyond ``expected`` are read too), or ``timeout``.
    """
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        by_id: dict[tuple[str, int, int, int], bytes] = {}
        received = 0
        subscriptions = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            subscriptions += 1
            consumer = client.subscribe(
                full_name(topic),
                f"read-back-{time.monotonic_ns()}",
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=5000,
            )
            last_new = time.monotonic()
            while True:
                now = time.monotonic()
                done = len(by_id) >= expected
                if now >= deadline or (done and now - last_new >= quiet_s):
                    break
                if not done and now - last_new >= stall_s:
                    break  # stalled: start over on a new subscription
                try:
                    message = consumer.receive(200)
                except pulsar.Timeout:
                    continue
                received += 1
                mid = message.message_id()
                key = (message.topic_name(), mid.ledger_id(), mid.entry_id(), mid.batch_index())
                if key not in by_id:
                    by_id[key] = message.data()
                    last_new = time.monotonic()
                consumer.acknowledge(message)
            consumer.close()
            if len(by_id) >= expected:
                break
        return Read(list(by_id.values()), received, subscriptions)
    finally:
        client.close()


def read_back(
    service_url: str, topic: str, expected: int, timeout: float = 60.0, quiet_s: float = 1.0
) -> ReadBack:
    """:func:`read_values`, sorted into sequence numbers and other values."""
    start = time.monotonic()
    read = read_values(service_url, topic, expected, timeout, quiet_s)
    result = ReadBack(received=read.received, subscriptions=read.subscriptions)
    for value in read.values:
        seq = seq_of(value)
        if seq is None:
            result.others[value] += 1
        else:
            result.seqs[seq] += 1
    result.seconds = time.monotonic() - start
    return result


def runs(seqs: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as inclusive ``(first, last)`` runs: ``[1, 2, 3, 7] -> [(1, 3), (7, 7)]``."""
    result: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if result and seq == result[-1][1] + 1:
            result[-1] = (result[-1][0], seq)
        else:
            result.append((seq, seq))
    return result


# -- a broker that never answers ------------------------------------------------------------


class SilentBroker:
    """Accepts TCP connections on 127.0.0.1 and reads them until EOF, never writing a byte."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = int(self._server.getsockname()[1])
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._conns: list[socket.socket] = []
        self.accepted: list[float] = []  # time.monotonic() of each accepted connection
        self.closed_by_peer = 0
        self.open = 0
        self.max_open = 0
        self.bytes_received = 0

    def start(self) -> SilentBroker:
        threading.Thread(target=self._accept, name="silent broker", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._server.close()
        with self._lock:
            for conn in self._conns:
                conn.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(0.2)
            with self._lock:
                self.accepted.append(time.monotonic())
                self._conns.append(conn)
                self.open += 1
                self.max_open = max(self.max_open, self.open)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                with self._lock:
                    self.closed_by_peer += 1
                break
            with self._lock:
                self.bytes_received += len(data)
        with self._lock:
            self.open -= 1
            if conn in self._conns:
                self._conns.remove(conn)
        conn.close()


# -- /proc, metrics and logs ------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (``VmRSS`` in ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def broker_connections(daemon: Any) -> int:
    return int(daemon.metrics().get("pulsar_bruce_broker_connections", 0))


@dataclass(frozen=True)
class FinalCounts:
    """The daemon's last log line: ``stopped: received R, acked A, discarded D``."""

    received: int
    acked: int
    discarded: int


_STOPPED = re.compile(r"stopped: received (\d+), acked (\d+), discarded (\d+)")


def final_counts(log: str) -> FinalCounts | None:
    matches = _STOPPED.findall(log)
    if not matches:
        return None
    received, acked, discarded = (int(x) for x in matches[-1])
    return FinalCounts(received, acked, discarded)


def nonzero(discarded: dict[str, int]) -> dict[str, int]:
    return {reason: n for reason, n in sorted(discarded.items()) if n}


def mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


@dataclass
class Outcome:
    """What one scenario run measured, and what it expected but did not get."""

    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def expect(self, condition: bool, problem: str) -> None:
        if not condition:
            self.problems.append(problem)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [f"== {self.name}: {'ok' if self.ok else 'FAILED'}"]
        width = max((len(k) for k in self.figures), default=0)
        lines += [f"   {key:<{width}}  {value}" for key, value in self.figures.items()]
        lines += [f"   PROBLEM: {problem}" for problem in self.problems]
        return "\n".join(lines)
