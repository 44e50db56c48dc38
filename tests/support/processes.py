"""Real processes for tests and ``bench/``: a pulsar-lite broker and the daemon.

Shared by ``tests/conftest.py`` (fixtures), the integration tests and the bench
runners, so every caller starts, waits on and scrapes them the same way.  Nothing
here sleeps to synchronise: every wait polls a condition until a deadline.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
#: Where daemon processes import ``pulsar_bruce`` and ``to_pulsar`` from, unless told otherwise.
SOURCE_ROOTS = (ROOT / "daemon", ROOT / "client_lib")

T = TypeVar("T")


class ProcessError(AssertionError):
    """A process failed, or a condition was not met before its deadline."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def quiet_port() -> int:
    """A free port below the kernel's ephemeral range, for a server that binds it seconds
    later (a JVM): any outgoing connection may take a free port *in* that range meanwhile."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    while True:
        port = random.randrange(10000, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in _QUIET_PORTS_GIVEN:
            _QUIET_PORTS_GIVEN.add(port)
            return port


#: Ports :func:`quiet_port` handed out in this process (never twice).
_QUIET_PORTS_GIVEN: set[int] = set()


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_for(
    condition: Callable[[], T | None], timeout: float = 30.0, what: str = "condition"
) -> T:
    """Poll ``condition`` (5 ms doubling to 100 ms) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    interval = 0.005
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ProcessError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 2, 0.1)


def source_env(roots: Sequence[Path] = SOURCE_ROOTS) -> dict[str, str]:
    """The environment for child processes: ``roots`` first on PYTHONPATH, so the checkout
    (or a snapshot of it) is what runs, however the package is installed."""
    env = dict(os.environ)
    paths = [str(root) for root in roots]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


# -- broker --------------------------------------------------------------------------------


class Broker:
    """A pulsar-lite process on a free port with its own data dir; restartable on the same port."""

    def __init__(self, workdir: Path, partitions: int, extra_config: str = ""):
        from pulsar_lite.binary_finder import find_pulsar_lite_binary

        self.binary = str(find_pulsar_lite_binary())
        self.workdir = workdir
        self.partitions = partitions
        self.port = free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "pulsar-lite.toml").write_text(
            f"default_partitions = {partitions}\n{extra_config}\n[metrics]\nenabled = false\n"
        )

    @property
    def pid(self) -> int:
        if self.process is None:
            raise ProcessError("broker is not running")
        return self.process.pid

    def start(self) -> None:
        with (self.workdir / "broker.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--config",
                    str(self.workdir / "pulsar-lite.toml"),
                    "--addr",
                    f"127.0.0.1:{self.port}",
                    "--db-path",
                    str(self.workdir / "data"),
                    "--log-level",
                    "warn",
                ],
                cwd=self.workdir,
                stdout=log,
                stderr=log,
            )
        wait_for(self._listening, 30, "the broker to listen")

    def _listening(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise ProcessError(f"broker exited with {self.process.returncode}; see {self.workdir}")
        return port_open(self.port)

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without closing anything."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def remove_data(self) -> None:
        """Delete the broker's data (after kill or stop), keeping its log and config:
        ``--db-path data`` is ``data.rocksdb`` and ``data.metadata.json``."""
        for path in self.workdir.glob("data*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None


# -- metrics -------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_DISCARDED = re.compile(r'pulsar_bruce_discarded_total\{reason="([a-z_]+)"\}')
_LATENCY_BUCKET = re.compile(r'pulsar_bruce_send_latency_seconds_bucket\{le="([^"]+)"\}')


#: The series :class:`Counters` needs: ``/metrics?name[]=...`` serves just these, a cheap
#: scrape for a tight poll (no histograms, no per-topic series).
COUNTER_SERIES = (
    "pulsar_bruce_received_total",
    "pulsar_bruce_acked_total",
    "pulsar_bruce_discarded_total",
    "pulsar_bruce_buffered_messages",
    "pulsar_bruce_possible_duplicates_total",
)


def scrape_metrics(port: int, names: Sequence[str] = ()) -> str:
    """One GET /metrics over a raw socket (cheaper than urllib at a 5 ms poll); ``names``:
    only those series (Prometheus' ``name[]`` filter)."""
    query = "?" + "&".join(f"name[]={name}" for name in names) if names else ""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET /metrics{query} HTTP/1.0\r\nHost: tests\r\n\r\n".encode())
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks).decode("latin-1")
    head, _, body = response.partition("\r\n\r\n")
    if not head.startswith("HTTP/1.1 200"):
        raise ProcessError(f"unexpected /metrics response: {head[:200]!r}")
    return body


def parse_samples(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` from a Prometheus text exposition."""
    samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


@dataclass
class Counters:
    """One scrape of the daemon's accounting counters (and the send latency histogram)."""

    received: int
    acked: int
    buffered: int
    possible_duplicates: int
    discarded: dict[str, int] = field(default_factory=dict)
    #: ``pulsar_bruce_send_latency_seconds`` cumulative buckets: upper bound -> count.
    latency_buckets: dict[float, int] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, samples: dict[str, float]) -> Counters:
        counters = cls(
            received=int(samples["pulsar_bruce_received_total"]),
            acked=int(samples["pulsar_bruce_acked_total"]),
            buffered=int(samples["pulsar_bruce_buffered_messages"]),
            possible_duplicates=int(samples["pulsar_bruce_possible_duplicates_total"]),
        )
        for name, value in samples.items():
            if match := _DISCARDED.fullmatch(name):
                counters.discarded[match.group(1)] = int(value)
            elif match := _LATENCY_BUCKET.fullmatch(name):
                counters.latency_buckets[float(match.group(1))] = int(value)
        return counters

    @property
    def total_discarded(self) -> int:
        return sum(self.discarded.values())

    @property
    def settled(self) -> int:
        """Messages with an outcome: acked or discarded."""
        return self.acked + self.total_discarded

    def identity_holds(self) -> bool:
        return self.received == self.acked + self.total_discarded + self.buffered


# -- daemon ----------------------------------------------------------------------------------


class Daemon:
    """``python -m pulsar_bruce`` as a subprocess, with its metrics read over HTTP."""

    #: The stream socket, as the daemon places it (None: off, or not known for a daemon
    #: started elsewhere and adopted).
    stream_path: str | None = None

    def __init__(
        self,
        workdir: Path,
        service_url: str,
        extra_args: list[str],
        source_roots: Sequence[Path] = SOURCE_ROOTS,
        cwd: Path | None = None,
        wrapper: Sequence[str] = (),
    ):
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.socket_path = str(workdir / "bruce.sock")
        self.metrics_port = free_port()
        self.log_path = workdir / "daemon.log"
        self.stream_path = self.socket_path.removesuffix(".sock") + ".stream.sock"
        if "--stream-socket" in extra_args:
            chosen = extra_args[extra_args.index("--stream-socket") + 1]
            self.stream_path = None if chosen.strip().lower() in ("off", "") else chosen
        self.argv = [
            *wrapper,  # e.g. prlimit: runs the daemon under other limits
            sys.executable,
            "-m",
            "pulsar_bruce",
            "--socket",
            self.socket_path,
            "--service-url",
            service_url,
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
            *extra_args,
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=log, env=source_env(source_roots), cwd=cwd
            )
        wait_for(self._serving, 30, "daemon to serve")

    @property
    def pid(self) -> int:
        return self.process.pid

    def _serving(self) -> bool:
        """Both sockets are there and the metrics port answers (the daemon opens the port
        first, so the port alone does not say the sockets are ready)."""
        self.check_alive()
        sockets = [self.socket_path] + ([self.stream_path] if self.stream_path else [])
        return all(os.path.exists(path) for path in sockets) and port_open(self.metrics_port)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise ProcessError(f"daemon exited with {self.process.returncode}:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def sender(self, timeout: float = 5.0) -> Any:
        from to_pulsar import Sender

        return Sender(self.socket_path, timeout=timeout)

    def send_raw(self, datagram: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(datagram, self.socket_path)

    def metrics(self, names: Sequence[str] = ()) -> dict[str, float]:
        """``{'name{labels}': value}`` from one scrape (of only ``names``, if given)."""
        return parse_samples(scrape_metrics(self.metrics_port, names))

    def counters(self, cheap: bool = False) -> Counters:
        """The accounting counters; ``cheap``: scrape only them (no latency buckets)."""
        return Counters.from_samples(self.metrics(COUNTER_SERIES if cheap else ()))

    def wait_settled(self, expected_received: int, timeout: float = 30.0) -> Counters:
        """Wait until every datagram sent has been received and has an outcome."""
        last: Counters | None = None

        def settled() -> Counters | None:
            nonlocal last
            self.check_alive()
            last = self.counters()
            return last if last.received >= expected_received and last.buffered == 0 else None

        try:
            return wait_for(settled, timeout, f"{expected_received} datagrams to settle")
        except ProcessError as exc:
            tail = self.log()[-2000:]
            raise ProcessError(f"{exc}; last scrape {last}; daemon log tail:\n{tail}") from exc

    def warm_up(self, topic: str, partitions: int) -> None:
        """Send one ``b"warm-up"`` message and wait until every partition's producer is ready,
        so PartitionKey messages are not failed over while producers are still connecting."""
        with self.sender() as sender:
            sender.send(topic, b"warm-up")
        name = topic if "://" in topic else f"persistent://public/default/{topic}"
        key = f'pulsar_bruce_topic_partitions_ready{{topic="{name}"}}'
        wait_for(lambda: self.metrics().get(key) == partitions, 30, f"{partitions} ready producers")

    def terminate(self, timeout: float = 60.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 30 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


# What systemd does between fork and exec: the socket to fd 3, LISTEN_FDS and our own pid.
_LAUNCHER = """\
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execv(sys.executable, [sys.executable, "-m", "pulsar_bruce", *sys.argv[2:]])
"""


def launch_activated(
    sock: socket.socket, workdir: Path, args: list[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with (workdir / "daemon.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(sock.fileno()), *args],
            pass_fds=(sock.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
