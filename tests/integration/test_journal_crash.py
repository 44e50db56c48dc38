"""``kill -9`` of a daemon with a state directory: its write-ahead journal gives back at the
next start what it had read and not delivered, whether it waited for a partition count or
sat in batches for a broker that was down; without the journal the same crash loses it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pulsar_bruce.spool import journal_records as jr

from tests.integration.test_spool_daemon import send_numbered, values_of
from tests.support.processes import Broker, free_port, wait_for

pytestmark = pytest.mark.broker

COUNT = 500


def received(daemon, count: int) -> None:
    wait_for(lambda: daemon.counters().received == count, 30, f"{count} datagrams received")


def test_messages_waiting_for_their_topic_survive_a_kill(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    topic = f"journal-wait-{uuid.uuid4().hex[:8]}"
    state = str(tmp_path / "state")
    nobody = f"pulsar://127.0.0.1:{free_port()}"  # no partition count: the messages wait
    first = start_daemon(nobody, "--spool-dir", state, "--send-timeout-s", "0")
    send_numbered(first, topic, range(COUNT))
    received(first, COUNT)
    first.kill()
    second = start_daemon(broker.url, "--spool-dir", state, restart_of=first)
    counters = second.wait_settled(COUNT, timeout=60)
    assert counters.acked == COUNT and counters.total_discarded == 0
    assert counters.possible_duplicates == 0  # never sent before: no duplicate possible
    assert values_of(broker, topic, COUNT) == set(range(COUNT))
    assert f"journal: {COUNT} messages read but not acknowledged" in second.log()


def test_batches_held_for_a_broker_that_is_down_survive_a_kill(
    tmp_path: Path, own_broker: Broker, start_daemon
) -> None:
    topic = f"journal-batch-{uuid.uuid4().hex[:8]}"
    state = str(tmp_path / "state")
    first = start_daemon(own_broker.url, "--spool-dir", state, "--send-timeout-s", "0")
    first.warm_up(topic, 4)
    own_broker.kill()
    send_numbered(first, topic, range(COUNT))
    received(first, COUNT + 1)  # and the warm-up message
    unacked = COUNT + 1 - first.counters().acked  # the warm-up's receipt may have come
    first.kill()
    assert list((tmp_path / "state").glob("journal-*.log"))
    own_broker.start()
    second = start_daemon(own_broker.url, "--spool-dir", state, restart_of=first)
    counters = second.wait_settled(unacked, timeout=90)
    assert counters.acked == unacked and counters.total_discarded == 0
    assert values_of(own_broker, topic, COUNT + 1) >= set(range(COUNT))


def test_without_the_journal_the_same_kill_loses_them(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    topic = f"journal-off-{uuid.uuid4().hex[:8]}"
    state = str(tmp_path / "state")
    nobody = f"pulsar://127.0.0.1:{free_port()}"
    first = start_daemon(nobody, "--spool-dir", state, "--no-spool-journal")
    send_numbered(first, topic, range(COUNT))
    received(first, COUNT)
    first.kill()
    assert not list((tmp_path / "state").glob("journal-*.log"))
    second = start_daemon(broker.url, "--spool-dir", state, restart_of=first)
    assert second.counters().received == 0  # the control: memory died with the process


def test_what_was_acked_is_recorded_settled_while_the_daemon_idles(
    tmp_path: Path, broker: Broker, start_daemon
) -> None:
    """No write follows the last receipts: the pipeline's journal tick records them (about once
    a second), so a kill then replays nothing."""
    topic = f"journal-tick-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    first = start_daemon(broker.url, "--spool-dir", str(state))
    send_numbered(first, topic, range(COUNT))
    first.wait_settled(COUNT, timeout=60)

    def owed() -> int:
        return jr.recover([p.read_bytes() for p in sorted(state.glob("journal-*.log"))]).messages

    wait_for(lambda: owed() == 0, 30, "the acked batches recorded settled in the journal")
    first.kill()
    second = start_daemon(broker.url, "--spool-dir", str(state), restart_of=first)
    assert second.counters().received == 0
    assert "read but not acknowledged" not in second.log()
