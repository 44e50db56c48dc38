"""A scripted fake of the daemon's stream socket, for testing the stream clients.

It listens on a UNIX stream socket in a background thread, splits what each
connection sends into records (``Size`` delimits them), keeps every message
record byte for byte (Producer records apart), and answers each FlushRequest
through a policy the test sets: by default "all acked". It can stop reading
(backpressure), delay or withhold an answer, close the connection, or answer garbage.

It packs responses with ``struct`` itself (not with ``to_pulsar.protocol``), so
the client's decoder is checked against an independent encoder.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_HEAD = struct.Struct(">ihh")
_FLUSH_REQUEST = struct.Struct(">ihhhq")


def flush_response(request_id: int, acked: int, discarded: dict[str, int] | None = None) -> bytes:
    """FlushResponse (ApiKey 259, v0), packed by hand from the protocol description."""
    body = b""
    for reason, count in (discarded or {}).items():
        name = reason.encode("ascii")
        body += struct.pack(">h", len(name)) + name + struct.pack(">q", count)
    head = struct.pack(
        ">ihhhqqh", 28 + len(body), 259, 0, 0, request_id, acked, len(discarded or {})
    )
    return head + body


@dataclass
class Flush:
    """One FlushRequest as the fake saw it, with the message records it covers."""

    raw: bytes
    request_id: int
    records: list[bytes]
    connection: int


#: A policy gets the flush and returns the bytes to answer (b"" answers nothing),
#: or None to close the connection instead.
Policy = Callable[[Flush], bytes | None]


def ack_all(flush: Flush) -> bytes | None:
    return flush_response(flush.request_id, len(flush.records))


@dataclass
class FakeStreamDaemon:
    path: Path
    policy: Policy = ack_all
    records: list[bytes] = field(default_factory=list)
    flushes: list[Flush] = field(default_factory=list)
    connections: int = 0
    #: Producer records (ApiKey 261): (connection, raw); not messages, so no flush counts them.
    producers: list[tuple[int, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reading = threading.Event()
        self.reading.set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(8)
        self._listener.setblocking(False)
        self._conns: list[socket.socket] = []
        # Message records since the last flush, per connection (server thread only).
        self._pending: dict[int, list[bytes]] = {}
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    # -- test side ----------------------------------------------------------------------------

    def stop_reading(self) -> None:
        """Backpressure: stop reading, so the client's socket buffer fills up."""
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    def message_records(self) -> list[bytes]:
        with self._lock:
            return list(self.records)

    def wait_flushes(self, n: int, timeout: float = 10.0) -> list[Flush]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.flushes) >= n:
                    return list(self.flushes)
            time.sleep(0.005)
        raise AssertionError(f"fake saw {len(self.flushes)} flushes, expected {n}")

    def answer_later(self, conn_index: int, data: bytes) -> None:
        """Send ``data`` on a connection from the test thread (e.g. a withheld answer)."""
        self._conns[conn_index].sendall(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()
        for conn in self._conns:
            conn.close()

    # -- server thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                if not self.reading.is_set():
                    time.sleep(0.005)
                    continue
                for key, _ in selector.select(0.05):
                    if key.data is None:
                        conn, _ = self._listener.accept()
                        conn.settimeout(5)
                        with self._lock:
                            index = self.connections
                            self.connections += 1
                            self._conns.append(conn)
                        selector.register(conn, selectors.EVENT_READ, (index, bytearray()))
                    elif not self._pump(key.fileobj, *key.data):  # type: ignore[arg-type]
                        selector.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]
        finally:
            selector.close()

    def _pump(self, conn: socket.socket, index: int, buf: bytearray) -> bool:
        """Read what is there and handle complete records; False once the connection ended."""
        try:
            data = conn.recv(1 << 16)
        except OSError:
            return False
        if not data:
            return False
        buf += data
        pending = self._pending.setdefault(index, [])
        while len(buf) >= 8:
            size, api_key, _ = _HEAD.unpack_from(buf, 0)
            if size < 8:
                raise AssertionError(f"client broke the framing: Size {size}")
            if len(buf) < size:
                break
            record = bytes(buf[:size])
            del buf[:size]
            if api_key == 258:
                _, _, _, _, request_id = _FLUSH_REQUEST.unpack(record)
                flush = Flush(record, request_id, pending, index)
                pending = self._pending[index] = []
                with self._lock:
                    self.flushes.append(flush)
                answer = self.policy(flush)
                if answer is None:
                    return False
                if answer:
                    conn.sendall(answer)
            elif api_key == 261:
                with self._lock:
                    self.producers.append((index, record))
            else:
                pending.append(record)
                with self._lock:
                    self.records.append(record)
        return True
