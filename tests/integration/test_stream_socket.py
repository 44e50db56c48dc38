"""The stream socket on a real daemon and broker: confirmed delivery, discards, backpressure."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from pulsar_bruce.input.stream_session import encode_flush_request
from to_pulsar.encoding import encode_any_partition, encode_partition_key

from tests.support.consume import consume
from tests.support.processes import Broker, wait_for

pytestmark = pytest.mark.broker


class RawStream:
    """A minimal client: records out, flush responses in (the library's own client is
    tested separately; this one checks the daemon against the wire format alone)."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(path)
        self._buffer = b""
        self._next_id = 1

    def send(self, record: bytes) -> None:
        self.sock.sendall(record)

    def flush(self) -> tuple[int, dict[str, int]]:
        request_id = self._next_id
        self._next_id += 1
        self.sock.sendall(encode_flush_request(request_id))
        response = self._read_response()
        assert response[0] == request_id
        return response[1], response[2]

    def _read_response(self) -> tuple[int, int, dict[str, int]]:
        while (
            len(self._buffer) < 4 or len(self._buffer) < struct.unpack_from(">i", self._buffer)[0]
        ):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the stream")
            self._buffer += chunk
        (size,) = struct.unpack_from(">i", self._buffer)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        _, api_key, _, _, request_id, acked, count = struct.unpack_from(">ihhhqqh", data)
        assert api_key == 259
        offset, discarded = struct.calcsize(">ihhhqqh"), {}
        for _ in range(count):
            (length,) = struct.unpack_from(">h", data, offset)
            reason = data[offset + 2 : offset + 2 + length].decode()
            discarded[reason] = struct.unpack_from(">q", data, offset + 2 + length)[0]
            offset += 10 + length
        return request_id, acked, discarded

    def close(self) -> None:
        self.sock.close()


def stream_path(daemon) -> str:
    return daemon.socket_path.removesuffix(".sock") + ".stream.sock"


def test_flush_answers_once_everything_before_it_is_acked(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url, "--batch-max-delay-ms", "50")
    topic = f"stream-{uuid.uuid4().hex[:8]}"
    client = RawStream(stream_path(daemon))
    for i in range(500):
        client.send(encode_partition_key(i, topic, b"s%d" % i, key=b"k%d" % i))
    assert client.flush() == (500, {})
    counters = daemon.counters()
    assert counters.acked == 500 and counters.received == 500  # acked before the answer
    client.send(encode_any_partition(topic, b"after"))
    assert client.flush() == (1, {})  # counts cover only what came since the last flush
    client.close()
    assert len(consume(broker.url, f"persistent://public/default/{topic}", 501)) == 501


def test_bad_records_are_counted_and_the_connection_stays_usable(
    broker: Broker, start_daemon
) -> None:
    daemon = start_daemon(broker.url, "--max-message-bytes", "1024")
    topic = f"stream-bad-{uuid.uuid4().hex[:8]}"
    client = RawStream(stream_path(daemon))
    good = encode_any_partition(topic, b"fine")
    client.send(good)
    client.send(encode_any_partition(topic, b"x" * 2000))  # over --max-message-bytes
    client.send(good[:8] + b"\x00\x01" + good[10:])  # Flags != 0: malformed
    # The encoder refuses "a/b" (the daemon's rule), so the name is patched in afterwards.
    client.send(encode_any_partition("a-b", b"bad topic").replace(b"a-b", b"a/b", 1))
    client.send(struct.pack(">ihh", 8, 999, 0))  # unknown ApiKey
    client.send(good)
    acked, discarded = client.flush()
    assert acked == 2
    assert discarded == {
        "too_large": 1,
        "malformed": 1,
        "bad_topic": 1,
        "unsupported_api_key": 1,
    }
    assert daemon.counters().identity_holds()
    client.close()


def test_lost_framing_closes_the_connection_only(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    client = RawStream(stream_path(daemon))
    client.send(struct.pack(">ihh", 4, 256, 0))  # Size 4 cannot be a record
    with pytest.raises(ConnectionError):
        client.flush()
    wait_for(lambda: "stream connection closed" in daemon.log(), 10, "the log line")
    again = RawStream(stream_path(daemon))
    again.send(encode_any_partition("after-framing-loss", b"ok"))
    assert again.flush() == (1, {})


def test_a_full_buffer_stops_reading_instead_of_discarding(
    own_broker: Broker, start_daemon
) -> None:
    daemon = start_daemon(
        own_broker.url, "--buffer-max-bytes", "64KiB", "--batch-max-bytes", "16KiB",
        "--send-timeout-s", "0",
    )  # fmt: skip
    topic = f"stream-full-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)
    own_broker.kill()
    client = RawStream(stream_path(daemon))
    result: dict[str, object] = {}

    def produce() -> None:
        for i in range(3000):  # 300 KB: the daemon must stop reading long before the end
            client.send(encode_any_partition(topic, struct.pack(">I", i) + b"p" * 96))
        result["flush"] = client.flush()

    thread = threading.Thread(target=produce)
    thread.start()
    wait_for(lambda: daemon.counters().buffered > 100, 30, "the buffer to fill")
    assert daemon.counters().received < 3000  # the rest waits in the socket, not discarded
    own_broker.start()
    thread.join(90)
    assert result["flush"] == (3000, {})
    counters = daemon.counters()
    assert counters.discarded["buffer_full"] == 0 and counters.acked == 3001


_TWO_FD_LAUNCHER = """\
import os, sys
datagram, stream = int(sys.argv[1]), int(sys.argv[2])
os.dup2(datagram, 3)
os.dup2(stream, 4)
os.environ.update(LISTEN_FDS="2", LISTEN_PID=str(os.getpid()))
os.execv(sys.executable, [sys.executable, "-m", "pulsar_bruce", *sys.argv[3:]])
"""


def test_the_stream_socket_can_be_socket_activated_too(broker: Broker, tmp_path: Path) -> None:
    from tests.support.processes import ROOT, free_port

    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    datagram.bind(str(tmp_path / "bruce.sock"))
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind(str(tmp_path / "confirmed.sock"))
    stream.listen()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(tmp_path / "confirmed.sock"))  # before the daemon exists: it waits
    topic = f"stream-activated-{uuid.uuid4().hex[:8]}"
    client.sendall(encode_any_partition(topic, b"early") + encode_flush_request(1))
    port = free_port()
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}")
    args = [str(datagram.fileno()), str(stream.fileno()), "--service-url", broker.url]
    args += ["--socket", str(tmp_path / "ignored.sock"), "--metrics-listen", f"127.0.0.1:{port}"]
    with (tmp_path / "daemon.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _TWO_FD_LAUNCHER, *args],
            pass_fds=(datagram.fileno(), stream.fileno()),
            stdout=log,
            stderr=log,
            env=env,
        )
    try:
        raw = RawStream.__new__(RawStream)
        raw.sock, raw._buffer, raw._next_id = client, b"", 2
        client.settimeout(60)
        assert raw._read_response() == (1, 1, {})
        assert not (tmp_path / "ignored.stream.sock").exists()
    finally:
        process.terminate()
        assert process.wait(30) == 0
    assert (tmp_path / "confirmed.sock").exists()  # systemd's file is left alone


def test_shutdown_still_answers_a_pending_flush(start_daemon) -> None:
    from tests.support.fakebroker import FakeBroker

    broker = FakeBroker().start()
    try:
        daemon = start_daemon(broker.url, "--shutdown-timeout-s", "1", "--batch-max-delay-ms", "5")
        client = RawStream(stream_path(daemon))
        client.send(encode_any_partition("stream-shutdown", b"first"))
        assert client.flush() == (1, {})
        broker.swallow_receipts()  # the next one will never be confirmed
        client.send(encode_any_partition("stream-shutdown", b"second"))
        client.sock.sendall(encode_flush_request(2))
        wait_for(lambda: len(broker.messages()) == 2, 10, "the second send")
        daemon.process.send_signal(signal.SIGTERM)
        assert client._read_response() == (2, 0, {"unconfirmed": 1})  # written: it may be stored
        assert daemon.process.wait(30) == 0
    finally:
        broker.stop()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_records_still_arriving_keep_the_daemon_within_its_buffer(
    broker: Broker, start_daemon
) -> None:
    """Four clients each declare a 12 MiB record and send most of it, slowly: the records
    count against --buffer-max-bytes (16 MiB) while they arrive, so the daemon stops
    reading the ones that do not fit instead of buffering 48 MiB, and a datagram
    sender is still served meanwhile."""
    daemon = start_daemon(
        broker.url, "--buffer-max-bytes", "16MiB", "--max-message-bytes", "12MiB",
    )  # fmt: skip
    idle = _rss_mib(daemon.pid)
    record_start = struct.pack(">i", 12 << 20) + b"v" * (11 << 20)  # 11 of its 12 MiB
    sent = [0] * 4

    def send(index: int) -> None:
        client = RawStream(stream_path(daemon))
        client.sock.settimeout(5)
        view = memoryview(record_start)
        try:
            while sent[index] < len(view):
                sent[index] += client.sock.send(view[sent[index] : sent[index] + 65536])
        except OSError:
            pass  # refused and closed (buffer_full), or no longer read: both are the point
        finally:
            client.sock.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    peak = _rss_mib(daemon.pid)
    assert peak < idle + 16 + 12, (idle, peak, sent)  # the buffer, plus one record's slack
    assert sum(sent) < 4 * len(record_start)  # not everything was taken in
    refused = daemon.counters().discarded["buffer_full"]
    assert refused >= 1 and "buffer_full" in daemon.log()
    topic = f"budget-{uuid.uuid4().hex[:8]}"
    with daemon.sender() as sender:
        sender.send(topic, b"still served")
    wait_for(lambda: daemon.counters().acked >= 1, 30, "the datagram sender to be served")
