"""Keep ``python -m bench.throughput`` and ``bench.spark_sink`` working: tiny runs end to end
(no timing is asserted)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], str]:
    """``python -m <args>`` from the checkout; the result and all it printed."""
    result = subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    return result, result.stdout + result.stderr


def test_quick_bench_runs_and_loses_nothing(tmp_path: Path) -> None:
    result, output = run_bench(
        "bench.throughput", "--quick", "--messages", "2000", "--rounds", "1",
        "--json", str(tmp_path / "bench.json"), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, output
    assert "rate (a) official client, msg/s" in result.stdout, output
    assert "kernel ceiling, msg/s" in result.stdout, output
    assert "rate (b) daemon, msg/s" in result.stdout, output
    assert "median ratio b/a" in result.stdout, output
    assert "no messages lost" in result.stdout, output
    assert (tmp_path / "bench.json").is_file()


@pytest.mark.spark
def test_spark_sink_bench_runs_and_loses_nothing() -> None:
    """``python -m bench.spark_sink``, tiny: both sides write, the daemon acks every row."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    result, output = run_bench("bench.spark_sink", "--rows", "3000", "--rounds", "1", timeout=300)
    assert result.returncode == 0, output
    assert f"executors' Python: {sys.executable}" in result.stdout, output
    assert "ratio to_pulsar/official: " in result.stdout, output
    assert "no rows lost" in result.stdout, output
