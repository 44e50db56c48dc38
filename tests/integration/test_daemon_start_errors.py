"""Start-time refusals of a real daemon process: one line, a non-zero exit, nothing left.

No broker is needed: every start here is refused before the daemon would talk to one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

NOWHERE = "pulsar://127.0.0.1:9"  # never reached: each start is refused first


def _run_daemon(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    keep = ("PULSAR_BRUCE_INTAKE", "PULSAR_BRUCE_RECEIVE")  # not options: the run's choice
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_BRUCE_") or k in keep}
    env["PYTHONPATH"] = f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}"
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", "--service-url", NOWHERE, *args],
        capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL, cwd=cwd,
    )  # fmt: skip


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if "error" in line.lower()]


def test_a_busy_metrics_port_names_metrics_listen(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_daemon(
            "--socket", str(tmp_path / "bruce.sock"), "--metrics-listen", f"127.0.0.1:{port}"
        )
    assert result.returncode == 1
    assert _error_lines(result) == [
        f"pulsar-bruce: error: --metrics-listen 127.0.0.1:{port}: cannot listen: "
        "Address already in use (give another HOST:PORT, or off)"
    ]
    assert not list(tmp_path.iterdir())  # refused before any socket file was made


def test_a_refused_stream_socket_leaves_no_datagram_socket_file(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as taken:
        taken.bind(str(tmp_path / "bruce.stream.sock"))
        taken.listen()
        result = _run_daemon("--socket", str(tmp_path / "bruce.sock"), "--metrics-listen", "off")
    assert result.returncode == 1
    assert _error_lines(result) == [
        f"pulsar-bruce: error: another process is accepting on {tmp_path / 'bruce.stream.sock'}"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["bruce.stream.sock"]  # the other's


def test_a_nul_byte_in_a_path_is_one_line_at_start_too(tmp_path: Path) -> None:
    config = tmp_path / "bruce.toml"
    config.write_text('spool_dir = "spool\\u0000"\n')
    for check in ([], ["--check-config"]):
        result = _run_daemon("--config", str(config), "--metrics-listen", "off", *check)
        assert result.returncode == 2
        assert result.stderr == (
            f"pulsar-bruce: error: {config}: spool_dir: expected a path without NUL bytes, "
            "got 'spool\\x00'\n"
        )


def test_an_unknown_flag_is_one_line_with_a_suggestion() -> None:
    result = _run_daemon("--metrics-listn", "off")
    assert result.returncode == 2
    assert result.stderr == (
        "pulsar-bruce: error: No such option '--metrics-listn'. "
        "(Did you mean one of: '--advertised-listener', '--metrics-listen'?)\n"
    )
