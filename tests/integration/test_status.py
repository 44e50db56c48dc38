"""``/status``, ``pulsar-bruce status`` and ``--check-config`` against a running daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from pulsar_bruce import __version__
from pulsar_bruce.native import INTAKE

from tests.support.processes import ROOT, Broker, free_port, port_open, wait_for

pytestmark = pytest.mark.broker

ENV = dict(os.environ, PYTHONPATH=f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}")


def cli(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV, **extra_env},
        stdin=subprocess.DEVNULL,
    )


def test_status_page_counts_topics_and_rejected_samples(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    with daemon.sender() as sender:
        for i in range(5):
            sender.send("status-topic", b"v%d" % i)
    daemon.send_raw(b"\x00\x00\x00\x20garbage")
    daemon.wait_settled(6)
    url = f"http://127.0.0.1:{daemon.metrics_port}/status"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"] == "application/json"
        doc = json.load(response)
    assert doc["received"] == 6 and doc["acked"] == 5
    assert doc["discarded"] == {"malformed": 1}
    assert (
        doc["received"] == doc["acked"] + sum(doc["discarded"].values()) + doc["buffered_messages"]
    )
    [topic] = doc["topics"]
    assert topic["name"] == "persistent://public/default/status-topic"
    assert topic["acked"] == 5 and topic["partitions"] == 4
    assert doc["recent_rejects"][0]["reason"] == "malformed"
    assert doc["connections"] == [f"127.0.0.1:{broker.port}"]
    assert doc["intake"] == INTAKE  # this pass's intake (make test runs one per intake)
    assert f"intake: {INTAKE}" in daemon.log()  # said once at start


def test_status_command_prints_a_summary(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    with daemon.sender() as sender:
        sender.send("status-cli", b"x")
    daemon.wait_settled(1)
    result = cli(
        "--metrics-listen", f"127.0.0.1:{daemon.metrics_port}", "status", "--interval", "0.1"
    )
    assert result.returncode == 0, result.stderr
    assert "acked       1" in result.stdout
    assert "persistent://public/default/status-cli" in result.stdout
    assert "throughput" in result.stdout


def test_version_names_the_intake_that_runs() -> None:
    assert cli("--version").stdout.strip().endswith(f"(intake: {INTAKE})")
    chosen = cli("--version", PULSAR_BRUCE_INTAKE="python")
    assert chosen.stdout.strip().endswith("(intake: python)")
    assert cli("-V").stdout == cli("--version").stdout  # -V: the short spelling


def test_a_wrong_intake_choice_is_one_line_and_exit_2() -> None:
    result = cli("--check-config", PULSAR_BRUCE_INTAKE="fastest")
    assert result.returncode == 2
    assert result.stderr == (
        "pulsar-bruce: error: PULSAR_BRUCE_INTAKE='fastest': use compiled, python or auto\n"
    )


def test_status_command_without_a_daemon_is_one_line() -> None:
    result = cli("status", "--url", "http://127.0.0.1:9/status")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cannot read" in result.stderr


def test_check_config_prints_the_effective_values_which_load_back(tmp_path: Path) -> None:
    config = tmp_path / "bruce.toml"
    config.write_text('buffer_max_bytes = "64MiB"\ncompression = "zlib"\n')
    result = cli(
        "--config",
        str(config),
        "--log-level",
        "debug",
        "--check-config",
        PULSAR_BRUCE_BATCH_MAX_MESSAGES="77",
    )
    assert result.returncode == 0, result.stderr
    assert "buffer_max_bytes = 67108864" in result.stdout
    assert 'compression = "zlib"' in result.stdout
    assert "batch_max_messages = 77" in result.stdout
    assert 'log_level = "debug"' in result.stdout
    effective = tmp_path / "effective.toml"
    effective.write_text(result.stdout)
    again = cli("--config", str(effective), "--check-config")
    assert again.returncode == 0 and again.stdout == result.stdout


def test_status_with_config_reads_that_daemon_and_says_so(
    broker: Broker, start_daemon, tmp_path: Path
) -> None:
    """``pulsar-bruce --config FILE status``: the daemon FILE configures (its metrics
    address), named on the first line with its pid and config file; the rejected
    datagrams' samples are shown, and the daemon has logged the mistake once."""
    config = tmp_path / "bruce.toml"
    config.write_text('log_level = "info"\n')
    daemon = start_daemon(broker.url, "--config", str(config))
    port = daemon.metrics_port  # the harness gives it on the command line; the file says so too
    config.write_text(f'log_level = "info"\nmetrics_listen = "127.0.0.1:{port}"\n')
    for _ in range(50):
        daemon.send_raw(b"\x00\x00\x00\x20garbage")
    daemon.wait_settled(50)
    wait_for(lambda: "as malformed" in daemon.log(), 30, "the malformed datagrams to be logged")
    result = cli("--config", str(config), "status", "--interval", "0")
    assert result.returncode == 0, result.stderr
    first, *rest = result.stdout.splitlines()
    assert first.startswith(
        f"pulsar-bruce {__version__} at http://127.0.0.1:{port}/status "
        f"(pid {daemon.pid}, config {config}), up "
    )
    assert "  rejected    the last 5, first bytes in base64:" in rest
    assert "    malformed  AAAAIGdhcmJhZ2U=" in rest
    [line] = [x for x in daemon.log().splitlines() if "as malformed" in x]
    assert "discarded " in line and "newest sample, first bytes in base64: AAAAIGdhcmJhZ2U=" in line


def test_after_sighup_status_reads_the_address_the_running_daemon_uses(tmp_path: Path) -> None:
    """A changed global option (``metrics_listen``) is named at SIGHUP as needing a
    restart, and ``pulsar-bruce --config FILE status`` still reads the running daemon
    (the file's new address has nobody on it), saying so; once it stops, nothing is left."""
    old_port, new_port = free_port(), free_port()
    sock = tmp_path / "bruce.sock"
    config = tmp_path / "bruce.toml"
    settings = f'socket = "{sock}"\nservice_url = "pulsar://127.0.0.1:9"\n'
    config.write_text(f'{settings}metrics_listen = "127.0.0.1:{old_port}"\n')
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "pulsar_bruce", "--config", str(config)],
            stdout=out, stderr=out, env=ENV,
        )  # fmt: skip
    try:
        written = tmp_path / "bruce.status-url"
        wait_for(lambda: written.exists() and port_open(old_port), 30, "the daemon to start")
        assert written.read_text() == f"http://127.0.0.1:{old_port}/status\n"
        config.write_text(f'{settings}metrics_listen = "127.0.0.1:{new_port}"\n')
        daemon.send_signal(signal.SIGHUP)
        wait_for(lambda: "per-topic settings reloaded" in log.read_text(), 30, "the reload")
        assert (
            "SIGHUP: changed, but applied only by a restart: metrics_listen; the daemon goes "
            "on with the values it started with (pulsar-bruce status reads the running one)"
        ) in log.read_text()
        result = cli("--config", str(config), "status", "--interval", "0")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(
            f"pulsar-bruce {__version__} at http://127.0.0.1:{old_port}/"
        )
        assert result.stderr == (
            f"pulsar-bruce: note: the daemon on {sock} serves its status at "
            f"http://127.0.0.1:{old_port}/status; the configuration says "
            f"http://127.0.0.1:{new_port}/status, which a restart applies\n"
        )
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0
        assert not written.exists()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)
