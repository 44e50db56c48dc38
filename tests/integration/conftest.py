"""The Spark session of the Spark integration tests (``test_spark*.py``): one per test run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.processes import ROOT


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2]`` session with ``to_pulsar.spark`` registered (see
    ``tests/support/spark_session.py``); skips where pyspark or Java is missing."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
    from tests.support.spark_session import session_for_tests

    session = session_for_tests("to_pulsar-tests", [str(ROOT / "client_lib")])
    yield session
    session.stop()
