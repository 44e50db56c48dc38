"""Encrypted topics in tests: RSA key files, and reading with the official Python consumer's
subscription options (``crypto_key_reader``, ``crypto_failure_action``)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any


def write_key_pair(directory: Path, name: str, pkcs8: bool = False) -> tuple[str, str]:
    """A fresh RSA-2048 key pair as PEM files ``NAME.pem`` (SubjectPublicKeyInfo) and
    ``NAME-private.pem`` (``BEGIN RSA PRIVATE KEY``, or PKCS#8 ``BEGIN PRIVATE KEY``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public, private = directory / f"{name}.pem", directory / f"{name}-private.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private_format = (
        serialization.PrivateFormat.PKCS8
        if pkcs8
        else serialization.PrivateFormat.TraditionalOpenSSL
    )
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, private_format, serialization.NoEncryption())
    )
    return str(public), str(private)


def read(url: str, topic: str, count: int, timeout: float, **subscribe: Any) -> list[bytes]:
    """Up to ``count`` message values from the start of ``topic`` (a new subscription with
    ``subscribe`` options); fewer when ``timeout`` passes with nothing more to read."""
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    values: list[bytes] = []
    try:
        consumer = client.subscribe(
            topic,
            f"read-{uuid.uuid4().hex[:8]}",
            initial_position=pulsar.InitialPosition.Earliest,
            **subscribe,
        )
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            try:
                message = consumer.receive(1000)
            except pulsar.Timeout:
                continue
            values.append(message.data())
            consumer.acknowledge(message)
        consumer.close()
    finally:
        client.close()
    return values
