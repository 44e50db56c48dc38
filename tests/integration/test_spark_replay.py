"""examples/spark_replay.py as a user runs it: its own process and local Spark session,
``python3`` on PATH without pyarrow, against a fake stream daemon.

The first run a user makes failed: Spark ran its workers as ``python3`` from PATH, which
had no pyarrow, and the cause was the last line of a Py4J traceback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakestream import FakeStreamDaemon
from tests.support.processes import ROOT

pytestmark = [pytest.mark.spark]

pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")

EXAMPLE = ROOT / "examples" / "spark_replay.py"


@pytest.fixture(scope="module")
def bare_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv's bin/ whose python3 has the standard library only (no pyarrow)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[FakeStreamDaemon]:
    fake = FakeStreamDaemon(tmp_path / "bruce.stream.sock")
    yield fake
    fake.close()


def replay(bare_bin: Path, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run the example the way the README says, with the bare python3 first on PATH."""
    csv = tmp_path / "data.csv"
    csv.write_text("id,user\n" + "".join(f"{i},u{i}\n" for i in range(5)))
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
    }
    clean.update(PATH=f"{bare_bin}{os.pathsep}{os.environ['PATH']}", SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(csv), "--topic", "replay",
         "--socket", str(tmp_path / "bruce.stream.sock"), "--master", "local[2]", *args],
        env={**clean, **env}, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_a_local_run_uses_the_drivers_python_and_prints_one_summary_line(
    bare_bin: Path, daemon: FakeStreamDaemon, tmp_path: Path
) -> None:
    done = replay(bare_bin, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("spark_replay.py: 5 rows from ")
    assert ": 5 acked, 0 discarded (" in done.stdout and done.stdout.count("\n") == 1
    assert len(daemon.message_records()) == 5


def test_workers_without_pyarrow_fail_with_one_line_naming_cause_and_remedy(
    bare_bin: Path, daemon: FakeStreamDaemon, tmp_path: Path
) -> None:
    """As on a cluster: the user's own PYSPARK_PYTHON is kept, and has no pyarrow, which
    the format needs (the example's default, write(), does not)."""
    python = str(bare_bin / "python3")
    done = replay(bare_bin, tmp_path, "--data-source", PYSPARK_PYTHON=python)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        f"spark_replay.py: error: to_pulsar: the Python Spark runs for its workers ({python}) "
        "has no pyarrow, which format('to_pulsar') needs (Spark passes rows to Python data "
        "sources as Arrow); use to_pulsar.spark.write(df, ...) or foreach_batch(...), which "
        "need nothing there, or install pyspark[sql] in that Python, or point PYSPARK_PYTHON "
        "at one that has it; with this example: leave out --data-source"
    ]
    assert daemon.message_records() == []


def test_a_wrong_socket_with_a_local_master_is_one_line_before_spark_starts(
    bare_bin: Path, tmp_path: Path
) -> None:
    """No daemon at --socket: the tasks would run on this host, so the example checks the
    socket first; before, Spark started, planned the job and logged the failed task (about
    90 lines of Java and Python tracebacks on stderr) before the line, after 50 s."""
    wrong = tmp_path / "bruce.stream.sock"  # replay() passes it; nothing listens there
    done = replay(bare_bin, tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"spark_replay.py: error: to_pulsar: checking the daemon on {socket.gethostname()}: "
        f"no daemon listening on stream socket {wrong} (No such file or directory). Each "
        "executor host needs a running pulsar-bruce daemon; set the option 'socket' (or "
        "TO_PULSAR_STREAM_SOCKET on the executors) if its socket is elsewhere."
    ]
