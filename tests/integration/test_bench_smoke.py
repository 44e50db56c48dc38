"""Keep ``python -m bench.throughput`` working: a tiny run end to end (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_runs_and_loses_nothing(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.throughput",
            "--quick",
            "--messages",
            "2000",
            "--rounds",
            "1",
            "--json",
            str(tmp_path / "bench.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "rate (a) official client, msg/s" in result.stdout, output
    assert "kernel ceiling, msg/s" in result.stdout, output
    assert "rate (b) daemon, msg/s" in result.stdout, output
    assert "median ratio b/a" in result.stdout, output
    assert "no messages lost" in result.stdout, output
    assert (tmp_path / "bench.json").is_file()
