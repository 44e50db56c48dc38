"""Server lifecycle on the event loop: signals, the shutdown wait, and what is left at the end.

The daemon runs in-process against a broker address where nothing listens, so
every message stays buffered until shutdown; signals are real (``os.kill`` on
this process), handled by the loop's signal handlers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from pulsar_bruce.config import Config, load_config
from pulsar_bruce.input.unix_sockets import SocketInUseError
from pulsar_bruce.server import Server
from to_pulsar.encoding import encode_any_partition

from tests.support.fakebroker import FakeBroker


def _config(tmp_path: Path, **options: Any) -> Config:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    flags = {
        "socket": str(tmp_path / "bruce.sock"),
        "service_url": f"pulsar://127.0.0.1:{port}",
        "metrics_listen": "off",
        "stream_socket": "off",
        "producer_name_prefix": "",
        **options,
    }
    return load_config(flags, {})


async def _until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _send(path: Path, count: int) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        for index in range(count):
            sender.sendto(encode_any_partition("t", f"m{index}".encode()), str(path))


def test_second_stop_signal_ends_the_shutdown_wait_and_handlers_are_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path, shutdown_timeout_s="600")
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGHUP)}
    server = Server(config)

    async def run() -> float:
        task = asyncio.create_task(server.serve())
        await asyncio.wait_for(server.started.wait(), 10)
        _send(tmp_path / "bruce.sock", 5)
        await _until(lambda: server.ledger.received == 5)
        os.kill(os.getpid(), signal.SIGINT)
        await _until(lambda: server._stop.is_set())
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)  # the daemon would wait 600 s for receipts
        await asyncio.wait_for(task, 30)
        return time.monotonic() - started

    with caplog.at_level("INFO"):
        waited = asyncio.run(run())
    assert waited < 30  # bounded by the wait_for above: the 600 s wait was cut short
    ledger = server.ledger
    assert ledger.discarded["shutdown"] == 5
    assert ledger.identity_holds() and ledger.buffered_messages == 0
    assert ledger.buffered_bytes == 0
    assert (
        "waiting up to 600 s (--shutdown-timeout-s) for the broker to acknowledge 5 buffered "
        "messages, then discarding the rest; a second Ctrl-C or SIGTERM stops now"
    ) in caplog.text
    assert "received SIGINT, shutting down" in caplog.text
    assert "received SIGINT again: not waiting for receipts any longer" in caplog.text
    assert "shutdown cut short: discarded 5" in caplog.text
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_shutdown_with_a_spool_keeps_what_is_left_for_the_next_start(tmp_path: Path) -> None:
    config = _config(tmp_path, shutdown_timeout_s="0", spool_dir=str(tmp_path / "spool"))
    server = Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        await asyncio.wait_for(server.started.wait(), 10)
        _send(tmp_path / "bruce.sock", 7)
        await _until(lambda: server.ledger.received == 7)
        server.request_stop()
        await asyncio.wait_for(task, 30)

    asyncio.run(run())
    ledger = server.ledger
    assert ledger.buffered_messages == ledger.spooled_messages == 7
    assert ledger.buffered_bytes == 0 and ledger.discarded_total == 0
    assert ledger.identity_holds()
    assert server.pipeline.store is not None and server.pipeline.store.size_bytes > 0


def test_sighup_reloads_per_topic_settings(tmp_path: Path) -> None:
    config_file = tmp_path / "bruce.toml"
    config_file.write_text('[topics."t"]\nrate_limit_messages = 3\nrate_limit_interval_s = 3600\n')
    flags = {
        "socket": str(tmp_path / "bruce.sock"),
        "metrics_listen": "off",
        "stream_socket": "off",
        "service_url": "pulsar://127.0.0.1:9",
        "shutdown_timeout_s": "0",
    }
    server = Server(load_config(flags, {}, str(config_file)), lambda: load_config(flags, {}))

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        await asyncio.wait_for(server.started.wait(), 10)
        _send(tmp_path / "bruce.sock", 5)
        await _until(lambda: server.ledger.received == 5)
        assert server.ledger.discarded["rate_limited"] == 2
        os.kill(os.getpid(), signal.SIGHUP)  # the reload drops the override: no limit
        topic = server.pipeline.manager.registry.by_name["persistent://public/default/t"]
        await _until(lambda: topic.rate_budget is None)
        _send(tmp_path / "bruce.sock", 5)
        await _until(lambda: server.ledger.received == 10)
        server.request_stop()
        await asyncio.wait_for(task, 60)

    asyncio.run(run())
    assert server.ledger.discarded["rate_limited"] == 2


def test_what_the_shutdown_timeout_leaves_is_never_send_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch is written but never confirmed; its send timeout (1 s) would fire during
    the shutdown wait (2 s), but the shutdown stops send timeouts: what the wait leaves is
    the shutdown's, and since the broker may have stored it, it counts as ``unconfirmed``
    (never as a loss: ``shutdown`` is for what was never written)."""
    broker = FakeBroker().start()
    broker.swallow_receipts()  # connected, never confirming
    config = _config(tmp_path, service_url=broker.url, send_timeout_s="1", shutdown_timeout_s="2")
    server = Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        await asyncio.wait_for(server.started.wait(), 10)
        _send(tmp_path / "bruce.sock", 3)
        await _until(lambda: sum(sent.num_messages for sent in broker.sends()) == 3)
        server.request_stop()
        await asyncio.wait_for(task, 30)

    try:
        with caplog.at_level("INFO"):
            asyncio.run(run())
    finally:
        broker.stop()
    assert server.ledger.discarded["unconfirmed"] == 3
    assert server.ledger.discarded["shutdown"] == server.ledger.discarded["send_timeout"] == 0
    assert "shutdown timeout: discarded 3 unacknowledged messages" in caplog.text
    assert "waiting up to 2 s (--shutdown-timeout-s)" in caplog.text


def test_a_start_refused_half_way_leaves_no_socket_file(tmp_path: Path) -> None:
    """The stream socket is refused (another process accepts on it) after the datagram
    socket was made: that file goes too, so no sender writes into a dead socket."""
    taken = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    taken.bind(str(tmp_path / "bruce.stream.sock"))
    taken.listen()
    server = Server(_config(tmp_path, stream_socket="auto"))
    with taken, pytest.raises(SocketInUseError, match="another process is accepting"):
        asyncio.run(server.serve())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bruce.stream.sock"]  # not ours
