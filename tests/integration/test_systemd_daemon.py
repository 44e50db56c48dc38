"""The real daemon under systemd's protocols: notify (READY/STATUS/WATCHDOG/STOPPING)
and socket activation (a passed datagram socket at fd 3).

Activation is always tested with a tiny launcher that does what systemd does
(dup2 the socket to fd 3, set LISTEN_FDS and LISTEN_PID, exec); when
``systemd-socket-activate`` is installed it is tested with that too.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker, Daemon, free_port, launch_activated, wait_for

Message = dict[str, str]


class NotifySocket:
    """Stands in for systemd's notify socket: a reader thread collects every message."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="sd-")  # short: sun_path is 108 bytes
        self.path = os.path.join(self._directory, "notify")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self._sock.settimeout(0.1)
        self.messages: list[tuple[float, Message]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            with self._lock:
                self.messages.append((time.monotonic(), fields))

    def timed(self) -> list[tuple[float, Message]]:
        with self._lock:
            return list(self.messages)

    def received(self) -> list[Message]:
        return [fields for _, fields in self.timed()]

    def wait_for(self, check: Callable[[Message], bool], what: str, timeout: float = 30) -> Message:
        def found() -> Message | None:
            return next((m for m in self.received() if check(m)), None)

        result: Message = wait_for(found, timeout, what)
        return result

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)
        self._sock.close()
        shutil.rmtree(self._directory, ignore_errors=True)


@pytest.fixture
def notify_socket() -> Iterator[NotifySocket]:
    listener = NotifySocket()
    yield listener
    listener.close()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="pb-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def daemon_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LISTEN_", "WATCHDOG_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "daemon"), str(ROOT / "client_lib")])
    env.pop("NOTIFY_SOCKET", None)
    env.update(extra)
    return env


def adopt(process: subprocess.Popen[bytes], workdir: Path, socket_path: str, port: int) -> Daemon:
    """A conftest :class:`Daemon` (metrics, sender, terminate) for a process started here."""
    daemon = Daemon.__new__(Daemon)
    daemon.workdir = workdir
    daemon.socket_path = socket_path
    daemon.metrics_port = port
    daemon.log_path = workdir / "daemon.log"
    daemon.process = process
    return daemon


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- notify ------------------------------------------------------------------------------------


@pytest.mark.broker
def test_ready_status_watchdog_and_stopping(
    broker: Broker, start_daemon, notify_socket: NotifySocket, monkeypatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.path)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # pings every 0.1 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    daemon = start_daemon(broker.url)

    ready = notify_socket.wait_for(lambda m: "READY" in m, "READY=1")
    assert ready["READY"] == "1"
    assert notify_socket.received()[0] == ready  # nothing before READY=1
    assert ready["STATUS"].startswith(f"receiving on {daemon.socket_path}; 0 buffered; ")

    wait_for(lambda: len(_watchdogs(notify_socket)) >= 5, 10, "5 watchdog pings")
    times = [t for t, m in notify_socket.timed() if m.get("WATCHDOG") == "1"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) < 1.0, gaps  # at half of WATCHDOG_USEC, with room for a slow machine
    assert all("STATUS" in m for m in _watchdogs(notify_socket))

    topic = unique("notify")
    with daemon.sender() as sender:
        sender.send(topic, b"hello")
    daemon.wait_settled(1)
    status = notify_socket.wait_for(
        lambda m: "1 received, 1 acked, 0 discarded" in m.get("STATUS", ""), "STATUS with 1 acked"
    )
    assert "; 0 buffered; 1 broker connection; " in status["STATUS"]

    assert daemon.terminate() == 0
    stopping = notify_socket.wait_for(lambda m: "STOPPING" in m, "STOPPING=1", timeout=5)
    assert stopping["STOPPING"] == "1"
    assert stopping["STATUS"].startswith("stopping; ")
    messages = notify_socket.received()
    assert "READY" not in str(messages[messages.index(stopping) :])


def _watchdogs(listener: NotifySocket) -> list[Message]:
    return [m for m in listener.received() if m.get("WATCHDOG") == "1"]


@pytest.mark.broker
def test_no_watchdog_pings_unless_asked(
    broker: Broker, start_daemon, notify_socket: NotifySocket, monkeypatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.path)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    daemon = start_daemon(broker.url)
    notify_socket.wait_for(lambda m: "READY" in m, "READY=1")
    time.sleep(0.5)  # a window in which 0.1 s pings would have arrived
    assert _watchdogs(notify_socket) == []
    assert daemon.terminate() == 0


# -- socket activation -------------------------------------------------------------------------


@pytest.mark.broker
def test_socket_activation_delivers_datagrams_queued_before_the_start(
    broker: Broker, notify_socket: NotifySocket, sock_dir: Path, tmp_path: Path
) -> None:
    from to_pulsar import Sender

    path = str(sock_dir / "bruce.sock")
    ignored = sock_dir / "not-this.sock"
    passed = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # "systemd's" socket
    passed.bind(path)
    topic = unique("activated")
    early = [f"early-{i}".encode() for i in range(8)]  # fewer than the kernel's default queue of 10
    with Sender(path) as sender:
        for value in early:
            sender.send(topic, value)

    port = free_port()
    args = ["--socket", str(ignored), "--service-url", broker.url]
    args += ["--metrics-listen", f"127.0.0.1:{port}"]
    process = launch_activated(passed, tmp_path, args, daemon_env(NOTIFY_SOCKET=notify_socket.path))
    daemon = adopt(process, tmp_path, path, port)
    try:
        ready = notify_socket.wait_for(lambda m: "READY" in m, "READY=1")
        assert ready["STATUS"].startswith(f"receiving on {path}; ")
        assert not ignored.exists()  # --socket is ignored under activation
        assert "(socket activation)" in daemon.log()
        late = [f"late-{i}".encode() for i in range(20)]
        with daemon.sender() as sender:
            for value in late:
                sender.send(topic, value)
        counters = daemon.wait_settled(len(early) + len(late))
        assert counters.acked == len(early) + len(late) and counters.identity_holds()
        values = {m.value for m in consume(broker.url, f"persistent://public/default/{topic}", 28)}
        assert values == set(early + late)

        assert daemon.terminate() == 0
        # The socket is systemd's: it stays, and keeps queueing for the next start.
        assert os.path.exists(path) and not ignored.exists()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender_sock:
            sender_sock.sendto(b"while stopped", path)
        passed.settimeout(5)
        assert passed.recv(100) == b"while stopped"
    finally:
        daemon.kill()
        passed.close()


def test_socket_activation_with_a_stream_socket_is_one_clear_error(tmp_path: Path) -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        process = launch_activated(left, tmp_path, ["--metrics-listen", "off"], daemon_env())
        assert process.wait(30) == 1
    finally:
        left.close()
        right.close()
    stderr = (tmp_path / "daemon.log").read_text()
    assert "fd 3 is an AF_UNIX/SOCK_STREAM (not listening) socket; expected" in stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.broker
@pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None,
    reason="systemd-socket-activate is not installed (Debian/Ubuntu: package systemd);"
    " activation is still covered by the launcher test above",
)
def test_under_systemd_socket_activate(
    broker: Broker, notify_socket: NotifySocket, sock_dir: Path, tmp_path: Path
) -> None:
    """``systemd-socket-activate --datagram`` starts the daemon on the first datagram."""
    from to_pulsar import Sender

    path = str(sock_dir / "bruce.sock")
    port = free_port()
    env = daemon_env()
    command = [
        shutil.which("systemd-socket-activate") or "systemd-socket-activate",
        "--datagram",
        "--listen",
        path,
        f"--setenv=PYTHONPATH={env['PYTHONPATH']}",
        f"--setenv=NOTIFY_SOCKET={notify_socket.path}",
        "--",
        sys.executable,
        "-m",
        "pulsar_bruce",
        "--socket",
        str(sock_dir / "ignored.sock"),
        "--service-url",
        broker.url,
        "--metrics-listen",
        f"127.0.0.1:{port}",
    ]
    with (tmp_path / "daemon.log").open("ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
        )
    daemon = adopt(process, tmp_path, path, port)
    try:
        wait_for(lambda: os.path.exists(path) or process.poll() is not None, 30, "the socket")
        assert process.poll() is None, daemon.log()
        assert notify_socket.received() == []  # nothing runs until a datagram arrives
        topic = unique("socket-activate")
        values = [f"v{i}".encode() for i in range(30)]
        # The first datagram starts the daemon; the queue (10 by default) fills meanwhile.
        with Sender(path, timeout=30) as sender:
            for value in values:
                sender.send(topic, value)
        notify_socket.wait_for(lambda m: "READY" in m, "READY=1")
        assert not (sock_dir / "ignored.sock").exists()
        counters = daemon.wait_settled(len(values))
        assert counters.acked == len(values), daemon.log()
        got = {m.value for m in consume(broker.url, f"persistent://public/default/{topic}", 30)}
        assert got == set(values)
        assert daemon.terminate() == 0
        assert "STOPPING" in str(notify_socket.received())
    finally:
        daemon.kill()


# -- MemoryDenyWriteExecute=yes -------------------------------------------------------------------

# PR_SET_MDWE (Linux 6.3+) refuses writable+executable mappings, as the unit's
# MemoryDenyWriteExecute=yes does, and survives exec.
_MDWE_LAUNCHER = """\
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, REFUSE_EXEC_GAIN
    sys.exit(77)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def _mdwe_supported() -> bool:
    probe = subprocess.run([sys.executable, "-c", _MDWE_LAUNCHER, "-c", "pass"], timeout=30)
    return probe.returncode == 0


@pytest.mark.broker
def test_daemon_runs_with_memory_deny_write_execute(broker: Broker, tmp_path: Path) -> None:
    if not _mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
    check = subprocess.run(
        [sys.executable, "-c", _MDWE_LAUNCHER, "-c", "import mmap; mmap.mmap(-1, 4096, prot=7)"],
        capture_output=True,
        timeout=30,
    )
    assert check.returncode != 0  # the restriction is really in force after exec
    path = str(tmp_path / "bruce.sock")
    port = free_port()
    args = ["-m", "pulsar_bruce", "--socket", path, "--service-url", broker.url]
    args += ["--metrics-listen", f"127.0.0.1:{port}", "--compression", "lz4"]
    with (tmp_path / "daemon.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _MDWE_LAUNCHER, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=daemon_env(),
        )
    daemon = adopt(process, tmp_path, path, port)
    try:
        wait_for(lambda: daemon._serving(), 30, "daemon to serve")
        topic = unique("mdwe")
        with daemon.sender() as sender:
            for i in range(10):
                sender.send(topic, f"m{i}".encode(), key=b"k")
        counters = daemon.wait_settled(10)
        assert counters.acked == 10, daemon.log()
        assert len(consume(broker.url, f"persistent://public/default/{topic}", 10)) == 10
        assert daemon.terminate() == 0
    finally:
        daemon.kill()
