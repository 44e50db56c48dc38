"""Shared fixtures: a real pulsar-lite broker, a real daemon process, a real consumer.

Nothing here sleeps to synchronise: every wait polls a condition until a deadline.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
for source_root in (ROOT / "daemon", ROOT / "client_lib"):
    if str(source_root) not in sys.path:
        sys.path.insert(0, str(source_root))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    interval = 0.005
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 2, 0.1)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


# -- broker --------------------------------------------------------------------------------


class Broker:
    """A pulsar-lite process on a free port with its own data dir; restartable on the same port."""

    def __init__(self, workdir: Path, partitions: int, extra_config: str = ""):
        from pulsar_lite.binary_finder import find_pulsar_lite_binary

        self.binary = find_pulsar_lite_binary()
        self.workdir = workdir
        self.partitions = partitions
        self.port = free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "pulsar-lite.toml").write_text(
            f"default_partitions = {partitions}\n{extra_config}\n[metrics]\nenabled = false\n"
        )

    def start(self) -> None:
        log = (self.workdir / "broker.log").open("ab")
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
        log.close()
        wait_for(lambda: self._alive() and _port_open(self.port), 30, "broker to listen")

    def _alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"broker exited with {self.process.returncode}")
        return True

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without closing anything."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A shared broker whose auto-created topics have 4 partitions (use unique topic names)."""
    instance = Broker(tmp_path_factory.mktemp("broker4"), partitions=4)
    instance.start()
    yield instance
    instance.stop()


@pytest.fixture(scope="session")
def flat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A shared broker whose auto-created topics are not partitioned."""
    instance = Broker(tmp_path_factory.mktemp("broker0"), partitions=0)
    instance.start()
    yield instance
    instance.stop()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker for one test (for tests that kill or restart it)."""
    instance = Broker(tmp_path / "broker", partitions=4)
    instance.start()
    yield instance
    instance.kill()


# -- daemon ----------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


class Daemon:
    """``python -m pulsar_bruce`` as a subprocess, with its metrics read over HTTP."""

    def __init__(self, workdir: Path, service_url: str, extra_args: list[str]):
        self.workdir = workdir
        self.socket_path = str(workdir / "bruce.sock")
        self.metrics_port = free_port()
        self.log_path = workdir / "daemon.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "daemon"), str(ROOT / "client_lib"), env.get("PYTHONPATH", "")]
        )
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
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
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
        log.close()
        wait_for(self._serving, 30, "daemon to serve")

    def _serving(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"daemon exited with {self.process.returncode}:\n{self.log()}")
        return os.path.exists(self.socket_path) and _port_open(self.metrics_port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def sender(self, timeout: float = 5.0) -> Any:
        from to_pulsar import Sender

        return Sender(self.socket_path, timeout=timeout)

    def send_raw(self, datagram: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(datagram, self.socket_path)

    def metrics(self) -> dict[str, float]:
        """``{'name{labels}': value}`` from one scrape."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        samples = {}
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match:
                samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
        return samples

    def counters(self) -> Counters:
        return Counters.from_samples(self.metrics())

    def wait_settled(self, expected_received: int, timeout: float = 30.0) -> Counters:
        """Wait until every datagram sent has been received and has an outcome."""

        def settled() -> Counters | None:
            c = self.counters()
            done = c.received >= expected_received and c.buffered == 0
            return c if done else None

        return wait_for(settled, timeout, f"{expected_received} datagrams to settle")

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

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@dataclass
class Counters:
    received: int
    acked: int
    buffered: int
    possible_duplicates: int
    discarded: dict[str, int]

    @classmethod
    def from_samples(cls, samples: dict[str, float]) -> Counters:
        discarded = {}
        for name, value in samples.items():
            match = re.fullmatch(r'pulsar_bruce_discarded_total\{reason="([a-z_]+)"\}', name)
            if match:
                discarded[match.group(1)] = int(value)
        return cls(
            received=int(samples["pulsar_bruce_received_total"]),
            acked=int(samples["pulsar_bruce_acked_total"]),
            buffered=int(samples["pulsar_bruce_buffered_messages"]),
            possible_duplicates=int(samples["pulsar_bruce_possible_duplicates_total"]),
            discarded=discarded,
        )

    @property
    def total_discarded(self) -> int:
        return sum(self.discarded.values())

    def identity_holds(self) -> bool:
        return self.received == self.acked + self.total_discarded + self.buffered


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """``start_daemon(service_url, *args)`` -> a running :class:`Daemon`, killed at teardown."""
    started: list[Daemon] = []

    def start(service_url: str, *extra_args: str) -> Daemon:
        workdir = tmp_path / f"daemon{len(started)}"
        workdir.mkdir()
        daemon = Daemon(workdir, service_url, list(extra_args))
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


# -- consumer ----------------------------------------------------------------------------------


@dataclass
class Received:
    value: bytes
    key: str
    partition: int
    event_time: int
    topic: str
    properties: dict[str, str]


def consume(service_url: str, topic: str, count: int, timeout: float = 30.0) -> list[Received]:
    """Read ``count`` messages from the beginning of ``topic`` with the official client."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(
            topic,
            f"test-{time.monotonic_ns()}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        messages: list[Received] = []
        deadline = time.monotonic() + timeout
        while len(messages) < count:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            try:
                message = consumer.receive(min(remaining_ms, 2000))
            except pulsar.Timeout:
                continue
            name = message.topic_name()
            match = re.search(r"-partition-(\d+)$", name)
            messages.append(
                Received(
                    value=message.data(),
                    key=message.partition_key(),
                    partition=int(match.group(1)) if match else -1,
                    event_time=message.event_timestamp(),
                    topic=name,
                    properties=dict(message.properties()),
                )
            )
            consumer.acknowledge(message)
        return messages
    finally:
        client.close()
