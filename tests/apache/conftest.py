"""The figures the cluster scenarios measure, printed at the end of the run."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.apache.test_cluster import REPORT

    if REPORT:
        terminalreporter.section("Apache Pulsar cluster: the daemon and the official client")
        for line in REPORT:
            terminalreporter.write_line(line)
