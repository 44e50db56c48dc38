"""Per-topic settings on a real daemon and broker: rate limits, max sizes, SIGHUP reload."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from tests.support.processes import Broker, wait_for

pytestmark = pytest.mark.broker


def test_rate_limit_and_max_size_per_topic(tmp_path: Path, broker: Broker, start_daemon) -> None:
    limited = f"limited-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "bruce.toml"
    config.write_text(
        f'[topics."{limited}"]\nrate_limit_messages = 10\nrate_limit_interval_s = 3600\n'
        'max_message_bytes = "1KiB"\n'
    )
    daemon = start_daemon(broker.url, "--config", str(config))
    free = f"free-{uuid.uuid4().hex[:8]}"
    with daemon.sender() as sender:
        for i in range(25):
            sender.send(limited, b"m%d" % i)
            sender.send(free, b"m%d" % i)
        sender.send(limited, b"x" * 2000)
        sender.send(free, b"x" * 2000)
    counters = daemon.wait_settled(52)
    assert counters.discarded["rate_limited"] == 15
    assert counters.discarded["too_large"] == 1
    assert counters.acked == 10 + 26
    samples = daemon.metrics()
    name = f"persistent://public/default/{limited}"
    key = f'pulsar_bruce_topic_discarded_total{{reason="rate_limited",topic="{name}"}}'
    assert samples[key] == 15
    # The log says so too, in one line for the topic (a user watching stderr saw nothing).
    said = f"topic {name}: discarded 15 messages as rate_limited in the last "
    wait_for(lambda: said in daemon.log(), 10, "the rate_limited line")
    line = next(line for line in daemon.log().splitlines() if said in line)
    assert "(its rate limit: rate_limit_messages 10 per rate_limit_interval_s 3600)" in line
    assert daemon.log().count("as rate_limited") == 1


def test_sighup_reloads_per_topic_settings_without_dropping(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    topic = f"reload-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "bruce.toml"
    config.write_text(
        f'[topics."{topic}"]\nrate_limit_messages = 5\nrate_limit_interval_s = 3600\n'
    )
    daemon = start_daemon(broker.url, "--config", str(config), "--batch-max-delay-ms", "2000")
    with daemon.sender() as sender:
        for i in range(8):
            sender.send(topic, b"a%d" % i)
    wait_for(lambda: daemon.counters().received == 8, 10, "the first messages")
    assert daemon.counters().discarded["rate_limited"] == 3
    config.write_text(f'[topics."{topic}"]\nrate_limit_messages = 0\n')
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "per-topic settings reloaded" in daemon.log(), 10, "the reload")
    with daemon.sender() as sender:
        for i in range(8):
            sender.send(topic, b"b%d" % i)
    counters = daemon.wait_settled(16)
    assert counters.discarded["rate_limited"] == 3
    assert counters.acked == 5 + 8  # the 5 buffered before the reload were not dropped
    assert daemon.process.poll() is None


def test_sighup_with_a_broken_file_keeps_the_old_settings(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    config = tmp_path / "bruce.toml"
    config.write_text("batch_max_messages = 100\n")
    daemon = start_daemon(broker.url, "--config", str(config))
    config.write_text("batch_max_messages = [\n")
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "configuration not reloaded" in daemon.log(), 10, "the refusal")
    with daemon.sender() as sender:
        sender.send("after-broken-reload", b"still works")
    assert daemon.wait_settled(1).acked == 1
