"""The daemon process and its local attack surface: the socket file, its directory, /metrics.

No broker is needed: the daemon starts (and serves its socket and metrics) while
its broker is unreachable.
"""

from __future__ import annotations

import grp
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.processes import ROOT, Daemon, free_port, wait_for

pytestmark = pytest.mark.timeout(60)

NO_BROKER = "pulsar://127.0.0.1:1"
EXPOSED = "metrics and status are reachable from the network"


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_BRUCE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "daemon"), str(ROOT / "client_lib")])
    return env


def run_to_exit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", "--service-url", NO_BROKER, *args],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=30,
        check=False,
    )


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``spawn(*args)`` -> a running daemon with its log at ``tmp_path / "daemon.log"``."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        with (tmp_path / "daemon.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "pulsar_bruce", "--service-url", NO_BROKER, *args],
                stdout=log,
                stderr=log,
                env=environment(),
            )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_world_writable_socket_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)  # anyone could delete our socket and put theirs in its place
    result = run_to_exit("--socket", str(directory / "bruce.sock"), "--metrics-listen", "off")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("pulsar-bruce: error: refusing to create the socket in")
    assert "world-writable without the sticky bit" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (directory / "bruce.sock").exists()


@pytest.fixture
def other_user() -> Iterator[str]:
    """A throwaway local user (needs root and useradd), removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a second user")
    name = f"pbtest{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--system", name], check=True, timeout=30)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False, timeout=30)


@pytest.mark.parametrize("which", ["datagram", "stream"])
def test_a_socket_directory_owned_by_another_user_is_refused(
    tmp_path: Path, other_user: str, which: str
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o755)  # not writable by us as a mode, but its owner could swap the socket
    shutil.chown(theirs, user=other_user)
    mine = tmp_path / "mine"
    mine.mkdir()
    datagram, stream = (theirs, mine) if which == "datagram" else (mine, theirs)
    result = run_to_exit(
        "--socket", str(datagram / "bruce.sock"),
        "--stream-socket", str(stream / "bruce.stream.sock"),
        "--metrics-listen", "off",
    )  # fmt: skip
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("pulsar-bruce: error: refusing to create the socket in")
    assert f"belongs to user {other_user!r}" in errors[0]
    assert "Traceback" not in result.stderr
    assert "owned by root" in result.stderr
    assert not (theirs / "bruce.sock").exists()
    assert not (theirs / "bruce.stream.sock").exists()


def test_a_sticky_world_writable_directory_is_accepted(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    directory = tmp_path / "sticky"
    directory.mkdir()
    directory.chmod(0o1777)  # like /tmp: only the owner may remove the socket
    socket_path = directory / "bruce.sock"
    daemon = spawn("--socket", str(socket_path), "--metrics-listen", "off")
    # The file appears at bind and gets its mode a moment later (the daemon's chmod).
    wait_for(
        lambda: daemon.poll() is None
        and socket_path.exists()
        and stat.S_IMODE(socket_path.stat().st_mode) == 0o660,
        30,
        "the socket, mode 0660",
    )
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_both_socket_files_get_the_configured_group_and_mode(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    mine = os.getgid()
    if os.geteuid() == 0:
        groups = [g for g in grp.getgrall() if g.gr_gid != mine]
    else:
        groups = [grp.getgrgid(gid) for gid in os.getgroups() if gid != mine]
    if not groups:
        pytest.skip("no group other than our primary one to give the socket to")
    group = groups[0]
    socket_path = tmp_path / "bruce.sock"
    stream_path = tmp_path / "bruce.stream.sock"  # --stream-socket auto
    daemon = spawn("--socket", str(socket_path), "--metrics-listen", "off",
                   "--socket-group", group.gr_name, "--socket-mode", "0620")  # fmt: skip
    log = tmp_path / "daemon.log"
    wait_for(lambda: "pulsar-bruce receiving on" in log.read_text(), 30, "the start line")
    for path in (socket_path, stream_path):
        info = path.stat()
        assert stat.S_ISSOCK(info.st_mode), path
        assert (info.st_gid, stat.S_IMODE(info.st_mode)) == (group.gr_gid, 0o620), path
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_an_unknown_socket_group_is_one_config_error_line(tmp_path: Path) -> None:
    result = run_to_exit("--socket", str(tmp_path / "bruce.sock"), "--metrics-listen", "off",
                         "--socket-group", "no-such-group-xyz")  # fmt: skip
    assert result.returncode == 2
    expected = "pulsar-bruce: error: --socket-group: unknown group 'no-such-group-xyz'\n"
    assert result.stderr == expected
    assert not (tmp_path / "bruce.sock").exists()


def test_metrics_on_a_network_address_are_warned_about_once(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    socket_path = tmp_path / "bruce.sock"
    port = free_port()
    daemon = spawn("--socket", str(socket_path), "--metrics-listen", f"0.0.0.0:{port}")
    log = tmp_path / "daemon.log"
    wait_for(lambda: EXPOSED in log.read_text(), 30, "the warning")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    lines = [line for line in log.read_text().splitlines() if EXPOSED in line]
    assert len(lines) == 1 and " WARNING " in lines[0]
    assert f"0.0.0.0:{port}" in lines[0]


def test_metrics_on_loopback_are_not_warned_about(start_daemon: Callable[..., Daemon]) -> None:
    daemon = start_daemon(NO_BROKER)  # --metrics-listen 127.0.0.1:<port>
    wait_for(lambda: "pulsar-bruce receiving on" in daemon.log(), 30, "the start line")
    assert EXPOSED not in daemon.log()
