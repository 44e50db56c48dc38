"""Overload: bounded memory with the broker gone, and the discard log as evidence."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pytest

from tests.support.processes import Broker, wait_for

pytestmark = pytest.mark.broker


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_memory_stays_within_the_cap_while_the_broker_is_stopped(
    own_broker: Broker, start_daemon
) -> None:
    cap = 8 * 1024 * 1024
    daemon = start_daemon(own_broker.url, "--buffer-max-bytes", str(cap), "--send-timeout-s", "0")
    topic = f"flood-{uuid.uuid4().hex[:8]}"
    daemon.warm_up(topic, 4)
    baseline = rss_bytes(daemon.process.pid)
    own_broker.kill()
    value = b"v" * 400
    sent = 200_000  # 80 MB offered, ten times the cap
    with daemon.sender() as sender:
        for i in range(sent):
            sender.send(topic, struct.pack(">I", i) + value)
    counters = wait_for(
        lambda: (c := daemon.counters()).received == sent + 1 and c, 60, "the flood to be read"
    )
    grown = rss_bytes(daemon.process.pid) - baseline
    assert counters.discarded["buffer_full"] > sent // 2
    assert counters.identity_holds()
    # The cap, plus the allocator's slack for it, plus a fixed overhead.
    assert grown < 2 * cap + 16 * 1024 * 1024, f"RSS grew by {grown / 1e6:.1f} MB"


def test_discard_log_names_every_message_given_up(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    log_path = tmp_path / "discards.log"
    topic = f"evidence-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "bruce.toml"
    config.write_text(
        f'[topics."{topic}"]\nrate_limit_messages = 1\nrate_limit_interval_s = 3600\n'
    )
    daemon = start_daemon(broker.url, "--config", str(config), "--discard-log", str(log_path))
    with daemon.sender() as sender:
        sender.send(topic, b"first is fine", key=b"k1")
        sender.send(topic, b"second is over the limit", key=b"k2")
        sender.send(topic, b"third too", key=b"\xff\xfe")
    daemon.send_raw(b"\x00\x00\x00\x63nonsense")
    daemon.wait_settled(4)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    by_reason = {}
    for line in lines:
        by_reason.setdefault(line["reason"], []).append(line)
    assert [line["key"] for line in by_reason["rate_limited"][:1]] == ["k2"]
    assert by_reason["rate_limited"][1]["key_b64"] == "//4="
    assert by_reason["rate_limited"][0]["topic"] == topic
    assert by_reason["rate_limited"][0]["value_size"] == len(b"second is over the limit")
    assert by_reason["malformed"][0]["topic"] is None
    assert all("time" in line and "value_b64_prefix" in line for line in lines)
    assert len(lines) == 3
