"""Messages larger than the broker's max message size: sent as Pulsar chunks, read back whole.

pulsar-lite enforces a 5 MiB message size and advertises none, so the daemon
assumes Pulsar's default, 5 MiB, and a 12 MB stream record cannot go out as one
frame (pulsar-lite would refuse it): it goes out as non-batched chunks (``uuid``, ``chunk_id``,
``num_chunks_from_msg``, ``total_chunk_msg_size``) and the official client's
consumer reassembles it, as it does for pulsar-client-java's chunked messages.
pulsar-lite stores and serves the chunks unchanged; its consumer dispatch repeats
chunks to a subscription that exists before they are written, so ``consume``
subscribes once the daemon has them acked (it always reads from the earliest).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from to_pulsar import FlushResult, StreamSender

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker

pytestmark = pytest.mark.broker

SIZE = 12_000_000


def test_to_pulsar_confirm_of_a_12_mb_message_is_acked_and_read_back_whole(
    flat_broker: Broker, start_daemon, tmp_path: Path
) -> None:
    """The issue's new-user check: ``to_pulsar --confirm --value-size 12000000``."""
    stream = str(tmp_path / "st.sock")
    daemon = start_daemon(flat_broker.url, "--stream-socket", stream, "--compression", "none")
    topic = f"chunk-cli-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "client_lib"))
    done = subprocess.run(
        [sys.executable, "-m", "to_pulsar.cli", "--confirm", "--stream-socket-path", stream,
         "--topic", topic, "--value-size", str(SIZE)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert daemon.counters().acked == 1
    [message] = consume(flat_broker.url, f"persistent://public/default/{topic}", 1)
    assert message.value == b"x" * SIZE


def test_incompressible_large_message_keeps_its_key_properties_and_event_time(
    flat_broker: Broker, start_daemon, tmp_path: Path
) -> None:
    """Random bytes do not shrink under lz4: the compressed payload is cut into chunks,
    each carrying the message's metadata, next to small messages batched as usual."""
    stream = str(tmp_path / "st.sock")
    daemon = start_daemon(flat_broker.url, "--stream-socket", stream, "--compression", "lz4")
    topic = f"chunk-meta-{uuid.uuid4().hex[:8]}"
    value = os.urandom(SIZE)
    with StreamSender(stream, timeout=120) as sender:
        sender.send(topic, b"before")
        sender.send(topic, value, key="big", timestamp_ms=1234,
                    properties={"kind": "chunked"})  # fmt: skip
        sender.send(topic, b"after")
        assert sender.flush() == FlushResult(3, {})
    assert daemon.counters().acked == 3
    messages = consume(flat_broker.url, f"persistent://public/default/{topic}", 3)
    assert [len(m.value) for m in messages] == [6, SIZE, 5]  # in order on the partition
    big = messages[1]
    assert big.value == value
    assert (big.key, big.event_time, big.properties) == ("big", 1234, {"kind": "chunked"})
