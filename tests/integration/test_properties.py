"""Message properties end to end: every sender and the CLI, read back with the official
consumer's ``properties()`` (the Java client's ``MessageImpl.getProperties``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

from to_pulsar import AsyncSender, AsyncStreamSender
from to_pulsar.stream import StreamSender

from tests.support.consume import consume
from tests.support.processes import Broker


def test_properties_from_every_sender_and_the_cli(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = f"props-{uuid.uuid4().hex[:8]}"
    with daemon.sender() as sender:
        sender.send(topic, b"sync", key=b"k1", properties={"from": "Sender", "n": "1"})
        sender.send(topic, b"keyed", partition_key=3, properties={"from": "Sender", "n": "2"})
        sender.send(topic, b"plain")  # no properties: a Bruce datagram as before

    async def async_senders() -> None:
        async with AsyncSender(daemon.socket_path) as aio:
            await aio.send(topic, b"async", properties={"from": "AsyncSender"})
        async with AsyncStreamSender(daemon.socket_path.replace(".sock", ".stream.sock")) as stream:
            await stream.send(topic, b"async-stream", properties={"from": "AsyncStreamSender"})
            assert (await stream.flush()).ok

    asyncio.run(async_senders())
    with StreamSender(daemon.socket_path.replace(".sock", ".stream.sock")) as stream:
        stream.send(topic, "ünïcode", properties={"from": "StreamSender", "é": "ü = 1"})
        assert stream.flush().ok
    cli = [
        sys.executable,
        "-m",
        "to_pulsar.cli",
        "--socket-path",
        daemon.socket_path,
        "--topic",
        topic,
    ]
    subprocess.run(
        [*cli, "--value", "cli", "--property", "from=cli", "--property", "eq=a=b"], check=True
    )
    counters = daemon.wait_settled(7)
    assert counters.acked == 7 and counters.identity_holds()

    received = {m.value: m for m in consume(broker.url, f"persistent://public/default/{topic}", 7)}
    assert received[b"sync"].properties == {"from": "Sender", "n": "1"}
    assert received[b"sync"].key == "k1"
    assert received[b"keyed"].properties == {"from": "Sender", "n": "2"}
    assert received[b"plain"].properties == {}
    assert received[b"async"].properties == {"from": "AsyncSender"}
    assert received[b"async-stream"].properties == {"from": "AsyncStreamSender"}
    assert received["ünïcode".encode()].properties == {"from": "StreamSender", "é": "ü = 1"}
    assert received[b"cli"].properties == {"from": "cli", "eq": "a=b"}
