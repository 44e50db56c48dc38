"""Chaos, short form (issue 4, point 2): real pulsar-lite brokers, real daemons, real faults.

The scenarios live in ``bench/chaos/scenarios.py`` and ``silent_scenario.py``;
``bench/chaos/run.py`` runs them in the long form (100,000 messages, a 20 s outage,
...).  Each test prints its figures (``pytest -s`` shows them) and fails with them
when an expectation broke.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from bench.chaos import scenarios, silent_scenario

pytestmark = [pytest.mark.broker, pytest.mark.timeout(90)]


def check(outcome: scenarios.Outcome) -> None:
    print(outcome.report())
    assert outcome.ok, outcome.report()


def test_broker_sigkilled_and_restarted_twice_loses_nothing(own_broker, start_daemon) -> None:
    check(
        scenarios.broker_restarts(
            own_broker, start_daemon, messages=20_000, rate=4_000, restarts=2, timeout=45
        )
    )


def test_broker_outage_without_spool_counts_every_buffer_full(own_broker, start_daemon) -> None:
    check(
        scenarios.broker_outage(
            own_broker,
            start_daemon,
            messages=12_000,
            rate=2_000,
            down_s=3.0,
            buffer_max_bytes=128 * 1024,
            timeout=45,
        )
    )


def test_broker_outage_with_the_spool_loses_nothing(
    own_broker, start_daemon, tmp_path: Path
) -> None:
    check(
        scenarios.broker_outage(
            own_broker,
            start_daemon,
            messages=12_000,
            rate=2_000,
            down_s=3.0,
            buffer_max_bytes=128 * 1024,
            timeout=45,
            spool_dir=str(tmp_path / "spool"),
        )
    )


def test_daemon_sigterm_under_load_delivers_everything_received(broker, start_daemon) -> None:
    check(scenarios.daemon_sigterm(broker, start_daemon, after=20_000, timeout=45))


def test_broker_that_never_answers_times_out_reconnects_and_stays_bounded(start_daemon) -> None:
    check(silent_scenario.silent_broker(start_daemon, buffer_max_bytes=2 * 1024 * 1024, timeout=45))


# Loaded into the daemon (``sitecustomize`` on its PYTHONPATH): closing its bound UNIX
# datagram socket takes 0.3 s, as if the daemon were preempted between its last drain of
# the socket at shutdown and the close.  Nothing else changes.
_SLOW_SOCKET_CLOSE = """
import socket
from pathlib import Path
import time

_close = socket.socket.close


def _slow_close(self):
    try:
        bound = self.family == socket.AF_UNIX and bool(self.getsockname())
    except OSError:
        bound = False
    if bound and self.type == socket.SOCK_DGRAM:
        time.sleep(0.3)
    _close(self)


socket.socket.close = _slow_close
"""


def inject_into_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Daemons started from now on import ``code`` first (as ``sitecustomize``)."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", str(inject))


def test_daemon_sigterm_loses_nothing_a_sender_queued_after_the_last_drain(
    broker, start_daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sender streaming flat out while the close is slow: its datagrams must either be
    received or fail to send (EPIPE), never vanish in the socket queue."""
    inject_into_daemon(tmp_path, monkeypatch, _SLOW_SOCKET_CLOSE)
    check(scenarios.daemon_sigterm(broker, start_daemon, after=5_000, timeout=45))


# Loaded into the daemon: shutting down the receive side of its bound UNIX datagram socket
# waits 1 s first, as if the daemon were preempted just before it; so the test can queue
# datagrams that only the final drain will read.
_SLOW_SHUT_RD = """
import socket
from pathlib import Path
import time

_shutdown = socket.socket.shutdown


def _slow_shutdown(self, how):
    try:
        bound = self.family == socket.AF_UNIX and bool(self.getsockname())
    except OSError:
        bound = False
    if bound and self.type == socket.SOCK_DGRAM and how == socket.SHUT_RD:
        time.sleep(1.0)
    _shutdown(self, how)


socket.socket.shutdown = _slow_shutdown
"""


def test_daemon_sigterm_drains_past_an_empty_datagram(
    broker, start_daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from to_pulsar import encode_any_partition

    from bench.chaos.tools import FinalCounts, final_counts, read_back, unique_topic, value_for
    from tests.support.processes import wait_for

    inject_into_daemon(tmp_path, monkeypatch, _SLOW_SHUT_RD)
    daemon = start_daemon(broker.url)
    topic = unique_topic("chaos-empty")
    daemon.warm_up(topic, broker.partitions)
    valid = [encode_any_partition(topic, value_for(seq, 16)) for seq in range(8)]
    queued = [b"", *valid]  # 9 datagrams: within net.unix.max_dgram_qlen
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(daemon.socket_path)
        sock.setblocking(False)
        daemon.process.send_signal(signal.SIGTERM)
        # The path goes first; from then on only the final drain reads the socket.
        wait_for(lambda: not os.path.exists(daemon.socket_path), 10, "the shutdown to start")
        for datagram in queued:
            sock.send(datagram)
    assert daemon.process.wait(30) == 0
    final = final_counts(daemon.log())
    # + the warm-up; the empty datagram is received and discarded as malformed
    assert final == FinalCounts(received=1 + 9, acked=1 + 8, discarded=1), final
    back = read_back(broker.url, topic, 8, timeout=20)
    assert sorted(back.seqs) == list(range(8))
