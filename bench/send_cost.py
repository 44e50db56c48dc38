"""Per-call cost of the Python senders, without a daemon: ``python -m bench.send_cost``.

Each sender writes into a socket whose other end a separate process drains with a
``recv_into()`` loop, so the numbers are the sender's own cost (encoding, the call,
the system call) and not a daemon's. Reported: best of ``--repeat`` runs of
``--messages`` sends, in the sender's CPU microseconds per message
(``time.process_time()``, so a busy machine or a full socket queue, which make the
sender wait, change little).

Rows: the encoding alone (``to_pulsar.core.encode_message``, no socket), a bare
``socket.send`` of the encoded datagram (what any sender pays), ``Sender.send``
(100 B, AnyPartition), ``Sender.send`` with a ``partition_key``,
``Sender.send_many`` (batches of 256 already built tuples), ``Sender.send_raw``
(encoded once) and ``StreamSender``-style buffering (``StreamSender.send`` into a
stream socket drained the same way; no daemon, so no ``flush()``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

_DRAIN = """
import socket, sys
kind = socket.SOCK_DGRAM if sys.argv[2] == "dgram" else socket.SOCK_STREAM
s = socket.socket(socket.AF_UNIX, kind)
s.bind(sys.argv[1])
if kind == socket.SOCK_STREAM:
    s.listen(1)
print("READY", flush=True)
if kind == socket.SOCK_STREAM:
    s, _ = s.accept()
buf = bytearray(1 << 20)
recv_into = s.recv_into
while recv_into(buf):
    pass
"""


def _drain(path: str, kind: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRAIN, path, kind], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "READY":
        raise SystemExit("drain process did not start")
    return proc


def _best(run: Callable[[int], None], n: int, repeat: int) -> float:
    """Best of ``repeat`` runs, the sender's CPU microseconds per message."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        run(n)
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def measure(n: int, repeat: int, size: int) -> dict[str, float]:
    from to_pulsar import Sender, encode_any_partition
    from to_pulsar.core import encode_message
    from to_pulsar.stream import StreamSender

    value = os.urandom(size)
    results: dict[str, float] = {}

    def encode_only(count: int) -> None:
        for _ in range(count):
            encode_message("bench-topic", value, None, None, None)

    results["encoding alone (no socket)"] = _best(encode_only, n, repeat)
    with tempfile.TemporaryDirectory(prefix="sc") as tmp:
        dgram = os.path.join(tmp, "d.sock")
        drain = _drain(dgram, "dgram")
        try:
            with Sender(dgram, timeout=None) as sender:
                send = sender.send

                def plain(count: int) -> None:
                    for _ in range(count):
                        send("bench-topic", value)

                def keyed(count: int) -> None:
                    for i in range(count):
                        send("bench-topic", value, partition_key=i)

                raw = encode_any_partition("bench-topic", value)
                send_raw = sender.send_raw

                def pre_encoded(count: int) -> None:
                    for _ in range(count):
                        send_raw(raw)

                bare_send = sender._sock.send  # the floor: the system call alone

                def bare(count: int) -> None:
                    for _ in range(count):
                        bare_send(raw)

                results["socket.send (encoded, the floor)"] = _best(bare, n, repeat)
                results["Sender.send"] = _best(plain, n, repeat)
                results["Sender.send partition_key"] = _best(keyed, n, repeat)
                results["Sender.send_raw"] = _best(pre_encoded, n, repeat)
                send_many = getattr(sender, "send_many", None)
                if send_many is not None:
                    batch = [("bench-topic", value)] * 256

                    def many(count: int) -> None:
                        for _ in range(count // len(batch)):
                            send_many(batch)

                    results["Sender.send_many (256 a call)"] = _best(many, n, repeat)
        finally:
            drain.kill()
            drain.wait()
        stream = os.path.join(tmp, "s.sock")
        drain = _drain(stream, "stream")
        try:
            with StreamSender(stream, timeout=None) as stream_sender:
                ssend = stream_sender.send

                def streamed(count: int) -> None:
                    for _ in range(count):
                        ssend("bench-topic", value)

                results["StreamSender.send"] = _best(streamed, n, repeat)
        finally:
            drain.kill()
            drain.wait()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args(argv)
    print(f"{args.size} B values, best of {args.repeat} x {args.messages:,} sends")
    for name, micros in measure(args.messages, args.repeat, args.size).items():
        print(f"  {name:32} {micros:6.2f} us/message")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
