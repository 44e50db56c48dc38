"""A bare ``make`` lists the documented targets instead of building a stamp file."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.processes import ROOT, Broker

MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="make not on PATH")


def test_a_bare_make_prints_every_documented_target() -> None:
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "--no-print-directory"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "up to date" not in done.stdout
    makefile = (ROOT / "Makefile").read_text()
    documented = re.findall(r"^## ([a-z-]+):", makefile, re.MULTILINE)
    assert {"help", "run", "test", "unit", "lint", "bench", "proto", "clean"} <= set(documented)
    listed = re.findall(r"^  ([a-z-]+) +\S", done.stdout, re.MULTILINE)
    assert listed == documented
    for target in documented:  # each one is a real target
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), target


def test_make_test_shows_its_slowest_tests_and_keeps_few_temporary_files() -> None:
    """Each pass of `make test` ends with its slowest tests; pytest keeps the temporary
    directories of failed tests only, of the last two runs."""
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "--no-print-directory", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    passes = [line for line in done.stdout.splitlines() if "-m pytest" in line]
    assert len(passes) == 2 and all("--durations=25" in line for line in passes), passes
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert options["ini_options"]["tmp_path_retention_policy"] == "failed"
    assert options["ini_options"]["tmp_path_retention_count"] == 2


@pytest.mark.broker
def test_a_brokers_data_is_removed_at_teardown_and_its_log_kept(tmp_path: Path) -> None:
    pytest.importorskip("pulsar_lite")
    pulsar = pytest.importorskip("pulsar")
    broker = Broker(tmp_path / "broker", partitions=0)
    broker.start()
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer("kept-until-teardown").send(b"x")
    finally:
        client.close()
    assert list((tmp_path / "broker").glob("data*"))
    broker.stop()
    broker.remove_data()  # what the fixtures do after stopping it
    assert not list((tmp_path / "broker").glob("data*"))
    assert (tmp_path / "broker" / "broker.log").exists()
