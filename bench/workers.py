"""The measured sides, each run in its own process: ``python bench/workers.py MODE PARAMS_JSON``.

Modes:

``official``
    publish with the official ``pulsar-client`` (batching, ``send_async``, ``flush``);
    ``callback`` false: ``send_async(payload, None)`` and ``flush()`` (its best),
    true: a Python callback per message counts the receipts
``sender``
    send Bruce datagrams to the daemon with ``to_pulsar.Sender``; ``stream`` true:
    ``to_pulsar.stream.StreamSender`` with one ``flush()`` at the end; ``sender_id``
    set: every value starts with ``STAMP.pack(sender_id, seq)``, for an order check
``ceiling``
    no daemon: a Python ``send()`` loop into a forked ``recv_into()`` loop on a UNIX
    datagram socket, what the kernel allows a Python sender and receiver
``consumer``
    read latency-stamped messages back with the official client
``pace``
    the paced loop of ``bench/many_senders.py`` alone, sending nothing (its floor)

Protocol (see ``harness.Worker``): print ``READY`` when set up, wait for ``GO`` on
stdin, work, print ``RESULT <json>``. Library output that would go to stdout is
redirected to stderr, so the protocol pipe carries nothing else.

Throughput runs time from ``GO`` on; in paced runs (``rate`` set) every value
starts with its send time (``time.time_ns()``) and a sequence number, for the
consumer to compute send -> receive latency.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

try:
    from bench.payloads import STAMP, payload_pool, stamped_values, values
except ModuleNotFoundError:  # run as a script (``python bench/workers.py``): bench/ is on the path
    from payloads import STAMP, payload_pool, stamped_values, values  # type: ignore[no-redef]

__all__ = ["MODES", "STAMP"]


def peak_rss_kib() -> int:
    """This process's peak resident set so far (VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def thread_clock() -> tuple[float, float, float, int]:
    """This thread so far: wall clock, seconds on a CPU, seconds waiting for one (run
    queue), and voluntary context switches (each time it slept, e.g. in a full send).

    From /proc/thread-self/schedstat and status; where schedstat reads zero (some
    sandboxes), on-CPU time is ``time.thread_time()`` and run-queue waits count as 0.
    """
    wall = time.monotonic()
    try:
        with open("/proc/thread-self/schedstat") as f:
            run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        run_ns = wait_ns = 0
    switches = 0
    with contextlib.suppress(OSError), open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                switches = int(line.split()[1])
    on_cpu = run_ns / 1e9 if run_ns else time.thread_time()
    return wall, on_cpu, wait_ns / 1e9, switches


def blocked_since(before: tuple[float, float, float, int]) -> dict[str, float]:
    """Off-CPU time of this thread since ``before`` not spent waiting for a CPU: for a
    send loop, the time its sends were blocked; and how many times it went to sleep."""
    after = thread_clock()
    wall, on_cpu, runq = (after[i] - before[i] for i in range(3))
    return {
        "blocked_s": max(0.0, wall - on_cpu - runq),
        "runq_wait_s": runq,
        "sleeps": after[3] - before[3],
    }


# -- official client --------------------------------------------------------------------------


def run_official(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    import pulsar

    n: int = p["messages"]
    client = pulsar.Client(p["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    producer = client.create_producer(
        p["topic"],
        batching_enabled=True,
        block_if_queue_full=True,
        batching_max_publish_delay_ms=10,
        max_pending_messages=p["max_pending"],
        compression_type=getattr(pulsar.CompressionType, p.get("compression", "none").upper()),
    )
    ok_result = pulsar.Result.Ok
    done = threading.Event()
    state = {"receipts": 0, "errors": 0, "t_last": 0.0}
    monotonic = time.monotonic

    def on_receipt(result: Any, _message_id: Any) -> None:
        count = state["receipts"] + 1
        state["receipts"] = count
        if result != ok_result:
            state["errors"] += 1
        if count == n:
            state["t_last"] = monotonic()
            done.set()

    send = producer.send_async
    callback = on_receipt if p.get("callback", True) else None
    keyed: bool = p["keyed"]
    rate: float | None = p.get("rate")
    pool = values(p)
    ready()

    cpu0 = time.process_time()
    clock0 = thread_clock()
    t0 = monotonic()
    if rate:
        for value in stamped_values(p):
            send(value, callback)
    elif keyed:
        for i, payload in zip(range(n), itertools.cycle(pool), strict=False):
            send(payload, callback, partition_key=str(i))
    else:
        for payload in itertools.islice(itertools.cycle(pool), n):
            send(payload, callback)
    t_sent = monotonic()
    blocked = blocked_since(clock0)
    try:
        producer.flush()  # returns once every message is persisted; raises if one failed
    except Exception:  # any failure of the official client is a lost run
        state["errors"] += 1
    if callback is None:
        state["t_last"] = monotonic()
        state["receipts"] = n if not state["errors"] else 0
        done.set()
    complete = done.wait(120)
    cpu1 = time.process_time()
    producer.close()
    client.close()
    return {
        "t0": t0,
        "t_sent": t_sent,
        "t_last": state["t_last"] if complete else None,
        "receipts": state["receipts"],
        "errors": state["errors"],
        "cpu_s": cpu1 - cpu0,
        "peak_rss_kib": peak_rss_kib(),
        **blocked,
    }


# -- to_pulsar sender -------------------------------------------------------------------------


def run_sender(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    from to_pulsar import Sender, SendTimeoutError

    n: int = p["messages"]
    topic: str = p["topic"]
    keyed: bool = p["keyed"]
    rate: float | None = p.get("rate")
    sender_id: int | None = p.get("sender_id")
    pool = values(p)
    pad = pool[0][: max(0, p["size"] - STAMP.size)]
    stream: Any = None
    if p.get("stream"):
        from to_pulsar.stream import StreamSender

        stream = sender = StreamSender(p["stream_socket"], timeout=p.get("timeout", 30.0))
    else:
        sender = Sender(p["socket"], timeout=p.get("timeout", 30.0))
    send = sender.send
    timeouts = 0

    def resend(value: bytes) -> None:
        """The send timed out (EAGAIN after ``timeout`` s of a full queue): count, retry."""
        nonlocal timeouts
        while True:
            timeouts += 1
            try:
                return send(topic, value)
            except SendTimeoutError:
                continue

    ready()

    cpu0 = time.process_time()
    clock0 = thread_clock()
    t0 = time.monotonic()
    if rate:
        for value in stamped_values(p):
            send(topic, value)
    elif keyed:
        for i, payload in zip(range(n), itertools.cycle(pool), strict=False):
            send(topic, payload, partition_key=i)
    elif sender_id is not None:
        pack = STAMP.pack
        for seq in range(n):
            value = pack(sender_id, seq) + pad
            try:
                send(topic, value)
            except SendTimeoutError:
                resend(value)
    else:
        for payload in itertools.islice(itertools.cycle(pool), n):
            try:
                send(topic, payload)
            except SendTimeoutError:
                resend(payload)
    flushed = stream.flush().ok if stream is not None else True
    t_sent = time.monotonic()
    blocked = blocked_since(clock0)
    cpu1 = time.process_time()
    sender.close()
    return {
        "t0": t0,
        "t_sent": t_sent,
        "cpu_s": cpu1 - cpu0,
        "peak_rss_kib": peak_rss_kib(),
        "flushed_ok": flushed,
        "send_timeouts": timeouts,
        **blocked,
    }


# -- kernel ceiling ---------------------------------------------------------------------------


def run_ceiling(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    """Python send() into Python recv_into() on one UNIX datagram socket, no daemon; the CPU
    of both ends (the receiver's is the floor of any daemon's receiving)."""
    import socket
    import tempfile

    n: int = p["messages"]
    pool = payload_pool(p["size"])
    with tempfile.TemporaryDirectory(prefix="ceil") as tmp:
        path = os.path.join(tmp, "c.sock")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(path)
        child = os.fork()
        if child == 0:  # the receiving process: read n datagrams, then leave
            buf = bytearray(1 << 16)
            recv_into = receiver.recv_into
            for _ in range(n):
                recv_into(buf)
            os._exit(0)
        receiver.close()
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sender.connect(path)
        send = sender.send
        ready()
        cpu0 = time.process_time()
        t0 = time.monotonic()
        for payload in itertools.islice(itertools.cycle(pool), n):
            send(payload)
        cpu1 = time.process_time()
        _, status, usage = os.wait4(child, 0)
        t_last = time.monotonic()
        sender.close()
    return {
        "t0": t0,
        "t_last": t_last,
        "cpu_s": cpu1 - cpu0,
        # The receiving process's whole life: what any reader of these datagrams pays at least.
        "receiver_cpu_s": usage.ru_utime + usage.ru_stime,
        "ok": status == 0,
    }


# -- the paced loop alone ----------------------------------------------------------------------


def run_pace(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    """The paced loop of a many-senders run, its values made and stamped but sent nowhere:
    what the application's own loop costs, the floor under either side's senders."""
    ready()
    cpu0 = time.process_time()
    t0 = time.monotonic()
    made = sum(1 for _ in stamped_values(p))
    t_sent = time.monotonic()
    cpu_s = time.process_time() - cpu0
    return {
        "t0": t0,
        "t_sent": t_sent,
        "made": made,
        "cpu_s": cpu_s,
        "peak_rss_kib": peak_rss_kib(),
    }


# -- latency consumer -------------------------------------------------------------------------


def run_consumer(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    import pulsar

    n: int = p["messages"]
    client = pulsar.Client(p["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    consumer = client.subscribe(
        p["topic"],
        f"bench-{time.monotonic_ns()}",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=5000,
    )
    ready()

    latencies_ns: list[int] = []
    seen = bytearray(n)
    duplicates = 0
    unpack = STAMP.unpack_from
    time_ns = time.time_ns
    receive = consumer.receive
    # Give up at the deadline, or once nothing new has arrived for idle_timeout seconds.
    deadline = time.monotonic() + p["timeout"]
    idle_timeout: float = p.get("idle_timeout", 10.0)
    last_new = time.monotonic()
    message = None
    while len(latencies_ns) < n:
        now_s = time.monotonic()
        if now_s > deadline or now_s - last_new > idle_timeout:
            break
        try:
            message = receive(500)
        except pulsar.Timeout:
            continue
        now = time_ns()
        sent_ns, seq = unpack(message.data())
        if seq < 0:
            continue
        if seen[seq]:
            duplicates += 1
            continue
        seen[seq] = 1
        latencies_ns.append(now - sent_ns)
        last_new = time.monotonic()
        if len(latencies_ns) % 1000 == 0:
            consumer.acknowledge_cumulative(message)
    if message is not None:
        consumer.acknowledge_cumulative(message)
    client.close()
    latencies_ns.sort()
    return {
        "received": len(latencies_ns),
        "duplicates": duplicates,
        "latencies": _summary(latencies_ns),
    }


def _summary(sorted_ns: list[int]) -> dict[str, float]:
    if not sorted_ns:
        return {}

    def pct(q: float) -> float:
        return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1e6

    return {
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": sorted_ns[-1] / 1e6,
    }


# -- entry point -------------------------------------------------------------------------------

MODES: dict[str, Callable[[dict[str, Any], Callable[[], None]], dict[str, Any]]] = {
    "official": run_official,
    "sender": run_sender,
    "ceiling": run_ceiling,
    "consumer": run_consumer,
    "pace": run_pace,
}


def main() -> None:
    mode, params = sys.argv[1], json.loads(sys.argv[2])
    # Keep the protocol on the original stdout; anything else printing to fd 1 goes to stderr.
    protocol: TextIO = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def ready() -> None:
        protocol.write("READY\n")
        protocol.flush()
        if sys.stdin.readline().strip() != "GO":
            raise SystemExit("expected GO")

    result = MODES[mode](params, ready)
    protocol.write("RESULT " + json.dumps(result) + "\n")
    protocol.flush()


if __name__ == "__main__":
    main()
