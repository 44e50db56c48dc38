"""SIGHUP with an encryption key file that became unusable: one error line, and the
configuration in force (its keys included) stays."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pulsar_bruce.config import load_config
from pulsar_bruce.server import Server

from tests.support.encrypted import write_key_pair


def test_sighup_keeps_the_configuration_when_a_key_file_is_unusable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    public, _ = write_key_pair(tmp_path, "app")
    flags = {
        "socket": str(tmp_path / "bruce.sock"),
        "metrics_listen": "off",
        "stream_socket": "off",
        "service_url": "pulsar://127.0.0.1:9",
        "encryption_keys": public,
    }
    server = Server(load_config(flags, {}), lambda: load_config(flags, {}))
    in_force = server.pipeline.topic_settings.config
    Path(public).write_text("replaced by something else\n")
    with caplog.at_level(logging.ERROR):
        server.reload()
    assert server.pipeline.topic_settings.config is in_force
    assert [r.getMessage() for r in caplog.records] == [
        f"SIGHUP: configuration not reloaded: --encryption-keys: {public} is not a PEM "
        "public key or certificate"
    ]
