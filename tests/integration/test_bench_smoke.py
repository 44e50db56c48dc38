"""Keep ``python -m bench.throughput``, ``bench.hostscale``, ``bench.spark_sink``,
``bench.spark_stream``, ``bench.reader_placement`` and ``bench.read_floor`` working: tiny
runs end to end (no timing is asserted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

#: Run once, in the compiled pass: they keep the tools working (the daemon's intakes are
#: compared by the rest of the suite, which runs on both).
pytestmark = [pytest.mark.broker, pytest.mark.bench]

ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, args: list[str], timeout: float, expect: list[str]) -> None:
    """``python -m bench.MODULE ARGS`` from the checkout exits 0 and prints each of ``expect``."""
    cmd = [sys.executable, "-m", f"bench.{module}", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for line in expect:
        assert line in result.stdout, output


def test_quick_bench_runs_and_loses_nothing(tmp_path: Path) -> None:
    run_bench(
        "throughput",
        ["--quick", "--messages", "2000", "--rounds", "1", "--json", str(tmp_path / "bench.json")],
        timeout=120,
        expect=[
            "rate (a) official client, msg/s",
            "kernel ceiling, msg/s",
            "kernel ceiling CPU, µs/msg: receiver sender",
            "rate (b) daemon, msg/s",
            "median ratio b/a",
            "no messages lost",
        ],
    )
    assert (tmp_path / "bench.json").is_file()


@pytest.mark.apache
def test_quick_bench_on_apache_pulsar_runs_and_loses_nothing(tmp_path: Path) -> None:
    """``--broker apache``: the bench starts its own Apache Pulsar standalone (it kills and
    restarts it for the hold test, which the shared session broker must not go through),
    warms it up, partitions the 4-partition row's topics through the admin API, and the
    hold test's kill and restart deliver every held message."""
    run_bench(
        "throughput",
        [
            *("--quick", "--broker", "apache", "--messages", "2000", "--rounds", "1"),
            *("--rss-messages", "5000", "--json", str(tmp_path / "bench.json")),
        ],
        timeout=300,  # a JVM broker's restart after SIGKILL can take a minute on a busy host
        expect=[
            "=== on Apache Pulsar ",
            "warm-up (not measured): 1,000 x 100 B through the official client",
            "median ratio b/a",
            "after restarting the broker all 5,000 were acked",
            "no messages lost",
        ],
    )
    results = json.loads((tmp_path / "bench.json").read_text())
    assert [run["broker"] for run in results["brokers"]] == ["apache"]
    assert {row["spec"]["partitions"] for row in results["brokers"][0]["rows"]} == {1, 4}


def test_hostscale_bench_runs_and_loses_nothing(tmp_path: Path) -> None:
    run_bench(
        "hostscale",
        [
            *("--senders", "1,2", "--messages", "1000", "--rounds", "1", "--partitions", "4"),
            *("--verify-messages", "500", "--json", str(tmp_path / "hostscale.json")),
        ],
        timeout=180,
        expect=[
            "one daemon's ceiling here",
            "order check K=2: 1,000/1,000 read back, 0 missing, 0 duplicates, 0 out of order",
            "nothing lost",
        ],
    )
    results = json.loads((tmp_path / "hostscale.json").read_text())
    assert [row["senders"] for row in results["k"]] == [1, 2]


@pytest.mark.spark
def test_spark_sink_bench_runs_and_loses_nothing() -> None:
    """``python -m bench.spark_sink``, tiny: both sides write, the daemon acks every row."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    run_bench(
        "spark_sink",
        ["--rows", "3000", "--rounds", "1", "--cases", "string", "--first-rows", "0"],
        timeout=300,
        expect=[
            "write: ",
            "the write's CPU cost to the job",
            f"executors' Python: {sys.executable}",
            "ratio to_pulsar/official: ",
            "no rows lost",
        ],
    )


@pytest.mark.spark
def test_spark_stream_bench_runs_and_loses_nothing() -> None:
    """``python -m bench.spark_stream``, tiny: every side's query runs its micro-batches, the
    daemon acks every committed row."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    run_bench(
        "spark_stream",
        ["--rows-per-batch", "2000", "--batches", "1", "--warm", "1"],
        timeout=300,
        expect=[
            "round 1 official ",
            "to_pulsar: ",
            "x less CPU per row",
            "foreach_batch: ",
            "no rows lost",
        ],
    )


def test_reader_placement_bench_runs_and_loses_nothing() -> None:
    run_bench(
        "reader_placement",
        ["--messages", "2000", "--rounds", "1"],
        timeout=120,
        expect=["median of 1 round(s)", "context switches", "no messages lost"],
    )


def test_read_floor_bench_runs() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    run_bench(
        "read_floor",
        ["--senders", "2", "--seconds", "1", "--total-rate", "2000", "--flat-out-rate", "5000"],
        timeout=120,
        expect=["K=  2 x", "flat out", "µs/datagram"],
    )
