"""The measured sides, each run in its own process: ``python bench/workers.py MODE PARAMS_JSON``.

Modes:

``official``
    publish with the official ``pulsar-client`` (batching, ``send_async``, ``flush``);
    ``callback`` false: ``send_async(payload, None)`` and ``flush()`` (its best),
    true: a Python callback per message counts the receipts
``sender``
    send Bruce datagrams to the daemon with ``to_pulsar.Sender``; ``stream`` true:
    ``to_pulsar.stream.StreamSender`` with one ``flush()`` at the end; ``sender_id``
    set: every value starts with ``STAMP.pack(sender_id, seq)``, for an order check;
    ``raw`` true (paced runs): the same loop sends one datagram encoded once with a bare
    ``socket.send``, the system call's share of a send
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

The official client's modes (``official``, ``consumer``) are in ``bench/workers_official.py``,
the clocks every mode reads in ``bench/worker_clock.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

try:
    from bench.payloads import STAMP, payload_pool, stamped_values, values
    from bench.worker_clock import blocked_since, peak_rss_kib, thread_clock
    from bench.workers_official import run_consumer, run_official
except ModuleNotFoundError:  # run as a script (``python bench/workers.py``): bench/ is on the path
    from payloads import STAMP, payload_pool, stamped_values, values  # type: ignore[no-redef]
    from worker_clock import (  # type: ignore[no-redef]
        blocked_since,
        peak_rss_kib,
        thread_clock,
    )
    from workers_official import run_consumer, run_official  # type: ignore[no-redef]

__all__ = ["MODES", "STAMP"]


# -- to_pulsar sender -------------------------------------------------------------------------


def raw_socket(path: str) -> socket.socket:
    """A plain blocking datagram socket connected to ``path`` (no ``to_pulsar``)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.connect(path)
    return sock


def run_sender(p: dict[str, Any], ready: Callable[[], None]) -> dict[str, Any]:
    from to_pulsar import Sender, SendTimeoutError, encode_any_partition

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
    if rate and p.get("raw"):  # the system call alone: one datagram, encoded once
        send_datagram = raw_socket(p["socket"]).send
        datagram = encode_any_partition(topic, pool[0])
        for _ in stamped_values(p):
            send_datagram(datagram)
    elif rate:
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
