"""examples/read_back.py: properties shown, long values cut, quiet under ``| head``."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.support.processes import ROOT, Broker

pytestmark = [pytest.mark.broker]

pulsar = pytest.importorskip("pulsar", reason="pulsar-client is not installed")

EXAMPLE = str(ROOT / "examples" / "read_back.py")
BIG = 300_000  # well past a pipe's buffer (64 KiB), so `| head` must break the pipe


@pytest.fixture(scope="module")
def topic(flat_broker: Broker) -> str:
    """Three messages: with properties, 2005 bytes, and BIG bytes."""
    name = f"read-back-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(flat_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(name)
        producer.send(b"hello", partition_key="k1", properties={"source": "web", "region": "eu"})
        producer.send(("x" + "é" * 1000 + "tail").encode())  # 2005 bytes: 200 split an é
        producer.send(b"y" * BIG)
    finally:
        client.close()
    return name


def read_back(broker: Broker, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, EXAMPLE, "--topic", topic, "--service-url", broker.url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_properties_and_long_values_cut_at_200_bytes(flat_broker: Broker, topic: str) -> None:
    done = read_back(flat_broker, topic)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        'key=k1 properties={"region": "eu", "source": "web"} value=hello',
        "value=x" + "é" * 99 + "... (2005 bytes)",
        "value=" + "y" * 200 + f"... ({BIG} bytes)",
    ]


def test_full_prints_whole_values(flat_broker: Broker, topic: str) -> None:
    done = read_back(flat_broker, topic, "--full")
    assert done.returncode == 0
    assert done.stdout.splitlines()[1:] == ["value=x" + "é" * 1000 + "tail", "value=" + "y" * BIG]


def test_a_reader_that_stops_early_ends_it_quietly(flat_broker: Broker, topic: str) -> None:
    """``read_back.py --full | head -1``: the big line cannot fit in the pipe, so the write
    blocks until the reader closes it, then fails with EPIPE: no BrokenPipeError traceback."""
    process = subprocess.Popen(
        [sys.executable, EXAMPLE, "--topic", topic, "--service-url", flat_broker.url, "--full"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith("key=k1 ")
    process.stdout.close()  # what `head -1` does after its line
    stderr = process.stderr.read()
    assert process.wait(timeout=60) == 0
    assert stderr == ""
