"""The Grafana dashboard only uses metric families the daemon really exports."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from tests.support.processes import ROOT, Broker

pytestmark = pytest.mark.broker

DASHBOARD = ROOT / "examples" / "grafana" / "pulsar-bruce-dashboard.json"


def test_every_metric_in_the_dashboard_is_exported(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    with daemon.sender() as sender:
        sender.send("dashboard-check", b"x")  # so per-topic families have a sample
    daemon.wait_settled(1)
    exported = {name.split("{")[0] for name in daemon.metrics()}
    # Families without samples yet (e.g. per-topic discards) still have a TYPE line.
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics") as response:
        for name, kind in re.findall(r"^# TYPE (\w+) (\w+)", response.read().decode(), re.M):
            exported |= {name, f"{name}_total"} if kind == "counter" else {name}

    dashboard = json.loads(DASHBOARD.read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\bpulsar_bruce_[a-z_]+", target["expr"]))
    assert used, "the dashboard queries no pulsar_bruce metric"
    assert used <= exported, f"not exported: {sorted(used - exported)}"
