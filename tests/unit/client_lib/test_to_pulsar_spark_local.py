"""``to_pulsar.spark.use_this_python_locally``: a local master's workers run the driver's
Python (the one with pyarrow), unless the user chose one."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")

from to_pulsar.spark import use_this_python_locally


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", " local-cluster[2,1,1024]"])
def test_a_local_master_gets_this_python(master: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert use_this_python_locally(master)
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


@pytest.mark.parametrize("master", [None, "yarn", "spark://h:7077", "k8s://https://h"])
def test_a_cluster_master_is_left_alone(
    master: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert not use_this_python_locally(master)
    assert "PYSPARK_PYTHON" not in os.environ


def test_the_users_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    assert not use_this_python_locally("local[2]")
    assert os.environ["PYSPARK_PYTHON"] == "/opt/py/bin/python3"
