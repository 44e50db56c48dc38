"""End-to-end encryption on pulsar-lite, read back with the official Python client.

A consumer given the private key (``pulsar.CryptoKeyReader``) reads the plaintext,
batches and a chunked message alike; one without it cannot: by default it gets
nothing, and with ``ConsumerCryptoFailureAction.CONSUME`` it gets the encrypted
payloads, in which no message's text appears.  A key file that cannot be used stops
the start with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from to_pulsar import FlushResult, StreamSender

from tests.support.encrypted import read, write_key_pair
from tests.support.processes import ROOT, Broker

pytestmark = pytest.mark.broker

#: Over pulsar-lite's 5 MiB message size: sent in chunks, each encrypted on its own.
BIG = 6_000_000


@pytest.fixture(scope="module")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return write_key_pair(tmp_path_factory.mktemp("keys"), "app")


def test_the_key_holder_reads_plaintext_and_no_one_else_does(
    flat_broker: Broker, start_daemon, key_files: tuple[str, str], tmp_path: Path
) -> None:
    import pulsar

    public, private = key_files
    stream = str(tmp_path / "st.sock")
    daemon = start_daemon(
        flat_broker.url,
        "--stream-socket", stream,
        "--encryption-keys", f"app={public}",
        "--compression", "none",  # so that a plaintext sent by mistake would show below
    )  # fmt: skip
    topic = f"persistent://public/default/secret-{uuid.uuid4().hex[:8]}"
    small = [b"secret number %03d" % i for i in range(200)]
    big = os.urandom(BIG)
    with StreamSender(stream, timeout=120) as sender:
        for value in small[:100]:
            sender.send(topic, value)
        sender.send(topic, big, key="big")
        for value in small[100:]:
            sender.send(topic, value)
        assert sender.flush() == FlushResult(len(small) + 1, {})
    counters = daemon.counters()
    assert counters.acked == len(small) + 1 and counters.identity_holds()

    reader = pulsar.CryptoKeyReader(public, private)
    values = read(flat_broker.url, topic, len(small) + 1, 60, crypto_key_reader=reader)
    assert values == [*small[:100], big, *small[100:]]

    # Without the key the default (FAIL) delivers nothing ...
    assert read(flat_broker.url, topic, 1, 3) == []
    # ... and CONSUME hands over the encrypted payloads, a whole batch per message (not
    # on this topic: libpulsar aborts on an encrypted chunked message it cannot decrypt).
    plain_batches = topic + "-batches"
    with StreamSender(stream) as sender:
        for value in small:
            sender.send(plain_batches, value)
        assert sender.flush() == FlushResult(len(small), {})
    consume = pulsar.ConsumerCryptoFailureAction.CONSUME
    encrypted = read(flat_broker.url, plain_batches, len(small), 10, crypto_failure_action=consume)
    assert 0 < len(encrypted) < len(small)  # batches, each one undecryptable message
    for payload in encrypted:
        assert b"secret number" not in payload
    with_key = read(flat_broker.url, plain_batches, len(small), 30, crypto_key_reader=reader)
    assert with_key == small


def run_daemon(*args: str) -> subprocess.CompletedProcess[str]:
    keep = ("PULSAR_BRUCE_INTAKE", "PULSAR_BRUCE_RECEIVE")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_BRUCE_") or k in keep}
    env["PYTHONPATH"] = f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}"
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", "--service-url", "pulsar://127.0.0.1:9", *args],
        capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("check", [(), ("--check-config",)])
def test_an_unusable_key_file_stops_the_start_with_one_line(
    tmp_path: Path, check: tuple[str, ...]
) -> None:
    ec_key = tmp_path / "ec.pem"
    ec_key.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    toml = tmp_path / "bruce.toml"
    toml.write_text(f'[topics."payments"]\nencryption_keys = ["{ec_key}"]\n')
    missing = tmp_path / "missing.pem"
    cases = [
        (
            ["--encryption-keys", f"app={missing}"],
            f"--encryption-keys: cannot read {missing}: No such file or directory",
        ),
        (
            ["--config", str(toml)],
            "topics.'persistent://public/default/payments'.encryption_keys: "
            f"{ec_key} is an EC key: only the Java client decrypts EC (ECIES) data keys, the "
            "Python, C++ and Node.js consumers (libpulsar) read RSA only; use an RSA key",
        ),
    ]
    for args, line in cases:
        result = run_daemon(
            "--socket", str(tmp_path / "bruce.sock"), "--metrics-listen", "off", *args, *check
        )
        assert (result.returncode, result.stderr) == (2, f"pulsar-bruce: error: {line}\n")
        assert not (tmp_path / "bruce.sock").exists()
