"""Failover on Apache Pulsar with broker deduplication: nothing lost, nothing stored twice.

Each test runs on a namespace of its own with deduplication enabled, sends unique
values (a counter) while something fails (topic unloads, a broker SIGKILL, a
daemon restart on its spool) and reads the topic back with the official client:
the multiset read back must be exactly the set of values sent.  Reading goes on
past the expected count until the topic has been quiet for a while, so a value
stored twice shows up as a second copy.

The daemon's counters are checked with the accounting identity only
(``received == acked + discarded + buffered``): a receipt the broker marks as a
duplicate (message id -1:-1) is counted as the discard ``deduplicated``, which is
no loss (the broker had stored the message already), so that is the only discard
reason allowed here.  What the official client reads back is the truth.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.apache_pulsar import ApachePulsar
from tests.support.processes import Counters, Daemon, wait_for
from tests.support.readback import SteadySender, assert_exactly_once, read_back, unique

pytestmark = [pytest.mark.apache, pytest.mark.timeout(180)]

#: Discards that are not a loss: the broker had the batch already.
HARMLESS_DISCARDS = {"deduplicated"}


def dedup_namespace(apache: ApachePulsar) -> str:
    """A namespace of this test's own, with broker deduplication enabled."""
    namespace = f"public/{unique('failover')}"
    apache.admin.create_namespace(namespace)
    apache.admin.set_deduplication(namespace, True)
    return namespace


def evidence(daemon: Daemon, apache: ApachePulsar) -> str:
    """The logs' tails, for a failure message."""
    broker_lines = [
        line for line in apache.log().splitlines() if " WARN " in line or " ERROR " in line
    ]
    return (
        f"\n--- daemon log tail:\n{daemon.log()[-4000:]}"
        f"\n--- broker warnings and errors (last 40):\n" + "\n".join(broker_lines[-40:])
    )


def assert_accounting(counters: Counters, received: int, context: Callable[[], str]) -> None:
    """``received`` datagrams, each acked, discarded as ``deduplicated``, or still buffered."""
    assert counters.received == received, f"{counters}{context()}"
    assert counters.identity_holds(), f"{counters}{context()}"
    harmful = {r: n for r, n in counters.discarded.items() if n and r not in HARMLESS_DISCARDS}
    assert not harmful, f"discards: {harmful}; {counters}{context()}"


def settled(daemon: Daemon, received: int, timeout: float) -> Counters:
    """Every datagram received, nothing buffered, nothing left in the spool."""

    def done() -> Counters | None:
        daemon.check_alive()
        counters = daemon.counters()
        spooled = daemon.metrics(["pulsar_bruce_spooled_messages"]).get(
            "pulsar_bruce_spooled_messages", 0
        )
        ok = counters.received >= received and counters.buffered == 0 and spooled == 0
        return counters if ok else None

    try:
        return wait_for(done, timeout, f"{received} datagrams to settle")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {daemon.counters()}\n{daemon.log()[-3000:]}") from exc


# -- 1. topic unloads mid-stream ------------------------------------------------------------


def test_topic_unloads_mid_stream_lose_and_duplicate_nothing(
    apache: ApachePulsar, start_daemon
) -> None:
    namespace = dedup_namespace(apache)
    topic = f"persistent://{namespace}/{unique('unload')}"
    apache.admin.create_partitioned_topic(topic, 4)
    daemon = start_daemon(apache.url, "--batch-max-messages", "20", "--batch-max-delay-ms", "5")
    daemon.warm_up(topic, 4)
    n = 3000
    sender = SteadySender(daemon.sender, topic, "u", n, rate=600)
    sender.start()
    for fraction in (0.25, 0.5, 0.75):
        wait_for(sender.at_least(int(n * fraction)), 30, f"{fraction:.0%} sent")
        apache.admin.unload(topic)
    sent = sender.finish(30)
    assert sender.error is None, f"sending failed: {sender.error!r}"
    assert len(sent) == n
    counters = daemon.wait_settled(1 + n, timeout=60)
    assert_accounting(counters, 1 + n, lambda: evidence(daemon, apache))
    assert counters.acked + counters.discarded.get("deduplicated", 0) == 1 + n, counters
    read = read_back(apache.url, topic, 1 + n)
    read.pop(b"warm-up", None)
    assert_exactly_once(read, sent, lambda: f"\n{counters}{evidence(daemon, apache)}")


# -- 2. broker SIGKILL mid-stream -----------------------------------------------------------


def test_broker_sigkill_mid_stream_loses_and_duplicates_nothing(
    start_apache: Callable[..., ApachePulsar], start_daemon
) -> None:
    apache = start_apache()
    namespace = dedup_namespace(apache)
    topic = f"persistent://{namespace}/{unique('kill')}"
    apache.admin.create_partitioned_topic(topic, 4)
    # The daemon's defaults ride the restart out: no send timeout (issue 28).
    daemon = start_daemon(apache.url, "--batch-max-messages", "20", "--batch-max-delay-ms", "5")
    daemon.warm_up(topic, 4)
    n = 3000
    sender = SteadySender(daemon.sender, topic, "k", n, rate=150)
    sender.start()
    wait_for(sender.at_least(n // 3), 30, "a third sent")
    apache.kill()
    wait_for(sender.at_least(n // 2), 30, "half sent")
    apache.start()
    sent = sender.finish(60)
    assert sender.error is None, f"sending failed: {sender.error!r}"
    assert len(sent) == n
    # After a SIGKILL the restarted standalone may answer ServiceNotReady (ledger recovery,
    # "not enough bookies") for a while, and a producer refused often enough backs off up
    # to a minute (as the Java client does): wait for one such round more than that.
    counters = settled(daemon, 1 + n, timeout=180)
    assert_accounting(counters, 1 + n, lambda: evidence(daemon, apache))
    read = read_back(apache.url, topic, 1 + n)
    read.pop(b"warm-up", None)
    assert_exactly_once(read, sent, lambda: f"\n{counters}{evidence(daemon, apache)}")


# -- 3. daemon restart on its spool ---------------------------------------------------------

_STOPPED = re.compile(r"stopped: received (\d+), acked (\d+), discarded (\d+)")
_KEPT = re.compile(r"(\d+) unacknowledged messages kept in the spool")


def test_daemon_restart_on_its_spool_loses_and_duplicates_nothing(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    namespace = dedup_namespace(apache)
    topic = f"persistent://{namespace}/{unique('restart')}"
    apache.admin.create_partitioned_topic(topic, 4)
    # No time for receipts at shutdown: what is in flight goes to the spool, and its replay
    # (same producer names, same sequence ids) meets batches the broker has stored already.
    args = (
        "--spool-dir", str(tmp_path / "spool"),
        "--shutdown-timeout-s", "0",
        "--batch-max-messages", "20",
        "--batch-max-delay-ms", "5",
    )  # fmt: skip
    first = start_daemon(apache.url, *args)
    first.warm_up(topic, 4)
    before = SteadySender(first.sender, topic, "a", 20_000, rate=2000)
    before.start()
    wait_for(before.at_least(2000), 30, "2000 sent")
    assert first.terminate() == 0
    sent_before = before.finish(30)
    first_log = first.log()
    stopped = _STOPPED.search(first_log)
    assert stopped, first_log[-2000:]
    # Whatever the socket took before the daemon went away is the daemon's to deliver.
    assert int(stopped.group(1)) == 1 + len(sent_before), first_log[-2000:]
    kept = sum(int(k) for k in _KEPT.findall(first_log))

    # The same socket path: the same (automatic) producer names, so the broker recognises
    # the replayed batches it stored before the shutdown.
    second = Daemon(first.workdir, apache.url, list(args))
    try:
        after = SteadySender(second.sender, topic, "b", 1000, rate=2000)
        after.start()
        sent_after = after.finish(30)
        assert after.error is None, f"sending failed: {after.error!r}"
        counters = settled(second, kept + len(sent_after), timeout=60)
        assert_accounting(counters, kept + len(sent_after), lambda: evidence(second, apache))
        sent = sent_before + sent_after
        read = read_back(apache.url, topic, 1 + len(sent))
        read.pop(b"warm-up", None)
        assert_exactly_once(read, sent, lambda: f"\n{counters}{evidence(second, apache)}")
    finally:
        second.kill()
