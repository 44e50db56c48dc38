"""to_pulsar's stream clients and ``to_pulsar --confirm`` through a real daemon to a real broker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from to_pulsar import FlushResult, StreamSender
from to_pulsar.aio import AsyncStreamSender

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker

pytestmark = pytest.mark.broker


def start(start_daemon, broker: Broker, tmp_path: Path, *args: str) -> tuple[object, str]:
    """A daemon with its stream socket at a short, explicit path."""
    stream = str(tmp_path / "st.sock")
    return start_daemon(broker.url, "--stream-socket", stream, *args), stream


def test_send_and_flush_confirms_every_message(broker: Broker, start_daemon, tmp_path) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path)
    topic = f"stream-client-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)  # partition keys land on key % 4 only once all 4 are ready
    n = 5000
    with StreamSender(stream, timeout=60) as sender:
        for i in range(n):
            sender.send(topic, b"m%d" % i, key=f"k{i}", partition_key=i, timestamp_ms=1000 + i)
        first = sender.flush()
        assert first == FlushResult(n, {}) and first.ok
        counters = daemon.counters()
        assert counters.acked == 1 + n  # acked by the broker before the answer came
        sender.send(topic, b"last", key="last")
        assert sender.flush() == FlushResult(1, {})
    messages = consume(broker.url, f"persistent://public/default/{topic}", 2 + n)
    by_value = {m.value: m for m in messages if m.value != b"warm-up"}
    assert len(by_value) == n + 1
    for i in range(n):
        message = by_value[b"m%d" % i]
        assert (message.key, message.partition, message.event_time) == (f"k{i}", i % 4, 1000 + i)


def test_oversized_record_is_counted_and_the_connection_stays_usable(
    broker: Broker, start_daemon, tmp_path
) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path, "--max-message-bytes", "1024")
    topic = f"stream-big-{uuid.uuid4().hex[:8]}"
    with StreamSender(stream) as sender:
        sender.send(topic, b"small")
        sender.send(topic, b"x" * 2000)
        sender.send(topic, b"small too")
        result = sender.flush()
        assert result == FlushResult(2, {"too_large": 1})
        assert not result.ok and result.total == 3
        sender.send(topic, b"after")  # same connection
        assert sender.flush() == FlushResult(1, {})
    assert daemon.counters().discarded["too_large"] == 1


def test_async_stream_sender(broker: Broker, start_daemon, tmp_path) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path)
    topic = f"stream-aio-{uuid.uuid4().hex[:8]}"

    async def main() -> FlushResult:
        async with AsyncStreamSender(stream) as sender:
            await asyncio.gather(*(sender.send(topic, b"a%d" % i) for i in range(2000)))
            return await sender.flush()

    assert asyncio.run(main()) == FlushResult(2000, {})
    assert daemon.counters().acked == 2000


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "client_lib"))
    return subprocess.run(
        [sys.executable, "-m", "to_pulsar.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_confirm_cli_exit_codes(broker: Broker, start_daemon, tmp_path) -> None:
    daemon, stream = start(start_daemon, broker, tmp_path, "--max-message-bytes", "1024")
    topic = f"stream-cli-{uuid.uuid4().hex[:8]}"
    ok = run_cli("--confirm", "--stream-socket-path", stream, "--topic", topic, "--value", "hi")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    assert daemon.counters().acked == 1  # acked before the command returned

    many = run_cli(
        "--confirm", "--stream-socket-path", stream, "--topic", topic,
        "--value-size", "100", "--count", "500",
    )  # fmt: skip
    assert (many.returncode, many.stderr) == (0, "")
    assert daemon.counters().acked == 501

    big = run_cli(
        "--confirm", "--stream-socket-path", stream, "--topic", topic,
        "--value-size", "2000", "--count", "3",
    )  # fmt: skip
    assert big.returncode == 1
    assert big.stderr == "to_pulsar: error: 3 of 3 messages discarded (too_large 3)\n"

    # A name the daemon would discard as bad_topic is refused before anything is sent.
    bad_topic = run_cli(
        "--confirm", "--stream-socket-path", stream, "--topic", "a/b", "--value", "v"
    )
    assert bad_topic.returncode == 2
    assert bad_topic.stderr.startswith("to_pulsar: error: invalid topic 'a/b': expected ")
    assert daemon.counters().acked == 501 and not daemon.counters().discarded.get("bad_topic")

    missing = run_cli(
        "--confirm", "--stream-socket-path", str(tmp_path / "nope.sock"),
        "--topic", topic, "--value", "v",
    )  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.startswith("to_pulsar: error: no daemon listening on stream socket")
    assert len(consume(broker.url, f"persistent://public/default/{topic}", 501)) == 501


def test_confirm_cli_names_a_value_too_large_to_buffer(
    broker: Broker, start_daemon, tmp_path
) -> None:
    """Past what the daemon would buffer for a record still arriving (256 KiB on), the
    record is skipped as it comes, not the connection closed: the sender learns
    ``too_large``, and the discard log has the topic and the value's real size."""
    log_path = tmp_path / "discards.log"
    daemon, stream = start(
        start_daemon, broker, tmp_path, "--max-message-bytes", "1048576",
        "--discard-log", str(log_path),
    )  # fmt: skip
    topic = f"stream-huge-{uuid.uuid4().hex[:8]}"
    big = run_cli(
        "--confirm", "--stream-socket-path", stream, "--topic", topic,
        "--value-size", "3000000", "--count", "2",
    )  # fmt: skip
    assert (big.returncode, big.stderr) == (
        1, "to_pulsar: error: 2 of 2 messages discarded (too_large 2)\n"
    )  # fmt: skip
    counters = daemon.wait_settled(2)
    assert counters.total_discarded == counters.discarded["too_large"] == 2
    assert counters.identity_holds()
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(x["reason"], x["topic"], x["value_size"]) for x in lines] == [
        ("too_large", topic, 3_000_000)
    ] * 2
    assert "stream connection closed" not in daemon.log()
