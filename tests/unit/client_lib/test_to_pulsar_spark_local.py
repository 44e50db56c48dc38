"""``to_pulsar.spark.use_this_python_locally``: a local master's workers run the driver's
Python (the one with pyarrow), unless the user chose one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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


class _Context:
    def __init__(self, master: str, python: str) -> None:
        self.master, self.pythonExec, self.applicationId = master, python, f"app-{id(self)}"


class _Session:
    """A session whose jobs fail: what is known without one needs none."""

    def __init__(self, context: _Context) -> None:
        self.sparkContext = context

    def range(self, *args: object) -> None:
        raise AssertionError("write() ran a job to ask the executors")


def test_local_workers_running_this_python_are_not_asked_about_pyarrow() -> None:
    """write() asks the executors whether they have pyarrow with a job of its own; with a
    local master whose workers run this very interpreter, the answer is this one's."""
    from to_pulsar import spark_driver

    session = _Session(_Context("local[2]", sys.executable))
    assert spark_driver._executors_have_arrow(session)  # type: ignore[arg-type]
    assert spark_driver._ARROW_ON_EXECUTORS[session.sparkContext.applicationId] is True


def test_which_workers_run_this_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same path, or the same file in the same folder (a virtualenv's python3 and
    python); not the same file elsewhere (the system's Python, which a virtualenv's links
    to, lacks its packages), nor a cluster's workers."""
    from to_pulsar.spark_driver import _local_workers_run_this_python as runs_this

    venv, system = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for folder in (venv, system):
        folder.mkdir(parents=True)
    real = system / "python3.11"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    for link in (venv / "python", venv / "python3", system / "python3"):
        link.symlink_to(real)
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    assert runs_this(_Context("local[2]", str(venv / "python")))
    assert runs_this(_Context("local", str(venv / "python3")))
    monkeypatch.setenv("PATH", str(venv))
    assert runs_this(_Context("local[*]", "python3"))
    assert not runs_this(_Context("local[2]", str(system / "python3")))
    assert not runs_this(_Context("yarn", str(venv / "python")))
    assert not runs_this(_Context("local[2]", str(tmp_path / "missing")))
