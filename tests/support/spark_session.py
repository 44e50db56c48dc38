"""The local Spark session of the Spark tests and ``bench/spark_sink.py``.

Its Python workers must be this interpreter (the same pyarrow and pulsar-client as
the driver) and must find what the caller puts on their path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any


def local_session(
    app: str, pythonpath: Sequence[str], register: bool = True, **config: str
) -> Any:
    """A ``local[2]`` session on 127.0.0.1 with ``to_pulsar.spark`` registered (unless not
    ``register``: as a job that never uses the format); ``pythonpath`` goes first on the
    workers' (and this process's children's) PYTHONPATH."""
    from pyspark.sql import SparkSession

    paths = os.pathsep.join(filter(None, [*pythonpath, os.environ.get("PYTHONPATH")]))
    os.environ["PYTHONPATH"] = paths
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executorEnv.PYTHONPATH", paths)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    for name, value in config.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if register:
        import to_pulsar.spark

        to_pulsar.spark.register(session)
    return session


def session_for_tests(app: str, pythonpath: Sequence[str]) -> Any:
    """The Spark tests' session (``local[2]``, 2 shuffle partitions, UTC): one per test run,
    as ``getOrCreate`` hands every module that asks the session already running. Skips the
    test where there is no Java runtime."""
    import shutil

    import pytest

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    return local_session(
        app,
        pythonpath,
        **{"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"},
    )
