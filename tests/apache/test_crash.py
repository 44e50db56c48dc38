"""``kill -9`` under load on Apache Pulsar with deduplication on (``bench/crash.py`` in
small): with the socket held as systemd holds it and a state directory, nothing the
sender handed over is lost and nothing is stored twice, however the kills fall."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.crash import run_setup
from tests.support.apache_pulsar import ApachePulsar

pytestmark = pytest.mark.apache


def test_kills_under_load_lose_nothing_and_store_nothing_twice(
    apache: ApachePulsar, tmp_path: Path
) -> None:
    namespace = f"public/crash-{uuid.uuid4().hex[:8]}"
    apache.admin.create_namespace(namespace)
    apache.admin.set_deduplication(namespace, True)
    broker = SimpleNamespace(
        url=apache.url,
        make_partitioned=lambda topic, n: apache.admin.create_partitioned_topic(topic, n),
    )
    result = run_setup(broker, tmp_path, "held", 5000, kills=3, interval=0.7, namespace=namespace)
    assert result.sent > 5000 * 0.7  # the sender ran through the kills
    assert (result.lost, result.twice) == (0, 0), result
