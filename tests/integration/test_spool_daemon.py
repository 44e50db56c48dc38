"""The disk spool with a real broker: outages, shutdown, restart, torn files."""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.consume import consume
from tests.support.processes import Broker, source_env, wait_for

pytestmark = pytest.mark.broker


def values_of(broker: Broker, topic: str, count: int) -> set[int]:
    messages = consume(broker.url, f"persistent://public/default/{topic}", count, timeout=30)
    return {struct.unpack(">I", m.value[:4])[0] for m in messages}


def send_numbered(daemon, topic: str, numbers: range, size: int = 100) -> None:
    with daemon.sender() as sender:
        for i in numbers:
            sender.send(topic, struct.pack(">I", i) + b"x" * (size - 4))


def test_overflow_goes_to_disk_and_arrives_after_the_outage(
    tmp_path: Path, own_broker: Broker, start_daemon
) -> None:
    topic = f"spill-{uuid.uuid4().hex[:8]}"
    daemon = start_daemon(
        own_broker.url,
        "--buffer-max-bytes", "64KiB",
        "--batch-max-bytes", "16KiB",
        "--spool-dir", str(tmp_path / "spool"),
        "--send-timeout-s", "0",
    )  # fmt: skip
    daemon.warm_up(topic, 4)
    own_broker.kill()
    send_numbered(daemon, topic, range(5000))  # 500 KB: far beyond 64 KiB of memory
    counters = wait_for(
        lambda: (c := daemon.counters()).received == 5001 and c, 30, "all datagrams received"
    )
    assert counters.discarded["buffer_full"] == 0
    assert daemon.metrics()["pulsar_bruce_spooled_messages"] > 0
    own_broker.start()
    counters = daemon.wait_settled(5001, timeout=90)
    assert counters.acked == 5001 and counters.total_discarded == 0
    assert values_of(own_broker, topic, 5001 + counters.possible_duplicates) >= set(range(5000))


def test_unreachable_broker_sends_new_messages_to_disk(
    tmp_path: Path, own_broker: Broker, start_daemon
) -> None:
    topic = f"away-{uuid.uuid4().hex[:8]}"
    daemon = start_daemon(
        own_broker.url, "--spool-dir", str(tmp_path / "spool"), "--spool-after-s", "0.5",
        "--send-timeout-s", "0",
    )  # fmt: skip
    daemon.warm_up(topic, 4)
    own_broker.kill()
    send_numbered(daemon, topic, range(10))
    wait_for(lambda: "no broker reachable" in daemon.log(), 30, "the spill to start")
    send_numbered(daemon, topic, range(10, 20))
    wait_for(
        lambda: daemon.metrics()["pulsar_bruce_spooled_messages"] == 10, 10, "10 messages on disk"
    )
    own_broker.start()
    counters = daemon.wait_settled(21, timeout=90)
    assert counters.acked == 21
    assert values_of(own_broker, topic, 21 + counters.possible_duplicates) >= set(range(20))


def test_shutdown_timeout_keeps_messages_for_the_next_start(
    tmp_path: Path, own_broker: Broker, start_daemon
) -> None:
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "spool"
    first = start_daemon(
        own_broker.url, "--spool-dir", str(spool), "--shutdown-timeout-s", "1",
        "--spool-after-s", "600",
    )  # fmt: skip
    first.warm_up(topic, 4)
    first.wait_settled(1)
    own_broker.kill()
    send_numbered(first, topic, range(300))
    wait_for(lambda: first.counters().received == 301, 30, "the datagrams")
    assert first.terminate() == 0
    assert "kept in the spool" in first.log()
    own_broker.start()
    second = start_daemon(own_broker.url, "--spool-dir", str(spool))
    counters = second.wait_settled(300, timeout=90)
    assert counters.acked == 300 and counters.total_discarded == 0
    assert values_of(own_broker, topic, 301 + counters.possible_duplicates) >= set(range(300))


def test_a_torn_spool_file_is_counted_and_the_rest_replayed(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    from pulsar_bruce.spool import records
    from to_pulsar.encoding import encode_any_partition

    topic = f"torn-{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "spool"
    spool.mkdir()
    good = [
        records.encode(records.DATAGRAM, encode_any_partition(topic, struct.pack(">I", i)))
        for i in range(5)
    ]
    (spool / "seg-000000000001.spool").write_bytes(b"".join(good) + good[0][:9])  # torn tail
    daemon = start_daemon(broker.url, "--spool-dir", str(spool))
    counters = daemon.wait_settled(5)
    assert counters.acked == 5 and counters.received == 5
    assert daemon.metrics()["pulsar_bruce_spool_corrupt_records_total"] == 1
    assert values_of(broker, topic, 5) == set(range(5))


def test_a_flipped_region_of_a_spool_file_is_counted_message_for_message(
    tmp_path: Path, own_broker: Broker, start_daemon
) -> None:
    """Issue 29: 64 bytes flipped across a record's header in the middle of the largest
    spool file. The messages that do not arrive are exactly those counted spool_damaged."""
    from pulsar_bruce.spool import records

    topic = f"flipped-{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "spool"
    sent = 3000
    first = start_daemon(
        own_broker.url,
        "--buffer-max-bytes", "64KiB",
        "--batch-max-bytes", "16KiB",
        "--spool-dir", str(spool),
        "--send-timeout-s", "0",
        "--shutdown-timeout-s", "1",
    )  # fmt: skip
    first.warm_up(topic, 4)
    first.wait_settled(1)
    own_broker.kill()
    send_numbered(first, topic, range(sent), size=1000)
    wait_for(lambda: first.counters().received == sent + 1, 30, "the datagrams")
    assert first.terminate() == 0
    largest = max(spool.glob("seg-*"), key=lambda path: path.stat().st_size)
    data = bytearray(largest.read_bytes())
    at = data.index(records.MAGIC, len(data) // 2)
    while data[at + records.HEADER_SIZE] != records.DATAGRAM:  # a datagram's header
        at = data.index(records.MAGIC, at + 1)
    for i in range(at - 30, at + 34):  # the end of one record and the next one's header
        data[i] ^= 0xFF
    largest.write_bytes(bytes(data))

    own_broker.start()
    second = start_daemon(own_broker.url, "--spool-dir", str(spool), restart_of=first)
    counters = second.wait_settled(sent, timeout=90)
    stored = values_of(own_broker, topic, 1 + counters.acked + counters.possible_duplicates)
    missing = set(range(sent)) - stored
    assert counters.identity_holds() and counters.received == sent
    assert len(missing) == counters.discarded["spool_damaged"] >= 2


def test_spool_list_on_a_running_daemons_directory_warns(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    """The journal keeps a file open in the directory while the daemon runs: ``spool
    list`` and ``check`` find it and say their view is a moment's snapshot."""
    spool = tmp_path / "spool"
    daemon = start_daemon(broker.url, "--spool-dir", str(spool))
    send_numbered(daemon, f"spool-busy-{uuid.uuid4().hex[:8]}", range(10))
    daemon.wait_settled(10)
    for command in ("list", "check"):
        done = subprocess.run(
            [sys.executable, "-m", "pulsar_bruce", "spool", command, str(spool)],
            capture_output=True, text=True, timeout=60, env=source_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith(
            f"pulsar-bruce: warning: {spool} is in use by a running pulsar-bruce "
            f"(pid {daemon.pid}): "
        )
