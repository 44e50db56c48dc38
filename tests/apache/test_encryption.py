"""End-to-end encryption on Apache Pulsar: a namespace that requires encryption takes the
daemon's producers and messages, and both official consumers read the plaintext: the Python
client (libpulsar) and the Java client (``MessageCryptoBc``, run from
``tests/apache/EncryptedReader.java`` on the broker's classpath), batches and a chunked
message alike.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from to_pulsar import FlushResult, StreamSender

from tests.support.apache_pulsar import ApachePulsar, classpath
from tests.support.encrypted import read, write_key_pair

pytestmark = pytest.mark.apache

READER = Path(__file__).with_name("EncryptedReader.java")
#: Over the broker's 5 MiB ``maxMessageSize``: chunks, each encrypted on its own.
BIG = 7_000_000


def java_read(url: str, topic: str, private: str, count: int) -> list[tuple[int, str]]:
    result = subprocess.run(
        ["java", "-cp", classpath(), str(READER), url, topic, "billing", private, str(count), "30"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("MSG ")]
    return [(int(length), digest) for _, length, digest in lines]


def test_an_encryption_required_namespace_and_both_official_consumers(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    import pulsar

    namespace = f"public/encrypted-{uuid.uuid4().hex[:8]}"
    apache.admin.create_namespace(namespace)
    apache.admin.call("POST", f"/admin/v2/namespaces/{namespace}/encryptionRequired", True)
    topic = f"persistent://{namespace}/invoices"
    client = pulsar.Client(apache.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:  # the policy is in force: a plain producer is refused
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
    finally:
        client.close()

    public, private = write_key_pair(tmp_path, "billing")
    stream = str(tmp_path / "st.sock")
    daemon = start_daemon(
        apache.url, "--stream-socket", stream, "--encryption-keys", f"billing={public}"
    )
    small = [b"invoice %04d: %d EUR" % (i, i * 7) for i in range(300)]
    big = os.urandom(BIG)
    values = [*small[:150], big, *small[150:]]
    with StreamSender(stream, timeout=120) as sender:
        for value in values:
            sender.send(topic, value)
        assert sender.flush() == FlushResult(len(values), {})
    counters = daemon.counters()
    assert counters.acked == len(values) and counters.identity_holds()

    reader = pulsar.CryptoKeyReader(public, private)
    assert read(apache.url, topic, len(values), 60, crypto_key_reader=reader) == values
    expected = [(len(v), hashlib.sha256(v).hexdigest()) for v in values]
    assert java_read(apache.url, topic, private, len(values)) == expected
