"""The shell functions (examples/shell/to_pulsar.sh), sourced in bash, over the to_pulsar CLI."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from to_pulsar import SOCKET_ENV_VAR, encode_any_partition

from tests.support.consume import consume
from tests.support.processes import ROOT, Broker

SCRIPT = ROOT / "examples" / "shell" / "to_pulsar.sh"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="bash not on PATH")


def bash(commands: str, socket_path: str | Path | None, cli: str | None = None, stdin: bytes = b""):
    """Source the script in a fresh bash and run ``commands`` (``set -u`` on)."""
    assert BASH is not None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "client_lib"), env.get("PYTHONPATH", "")])
    env.pop(SOCKET_ENV_VAR, None)
    if socket_path is not None:
        env[SOCKET_ENV_VAR] = str(socket_path)
    env["TO_PULSAR_CLI"] = cli or f"{sys.executable} -m to_pulsar.cli"
    return subprocess.run(
        [BASH, "-c", f'set -u; . "$1"; {commands}', "bash", str(SCRIPT)],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
    )


def recv_any(receiver: socket.socket, topic: str, value: bytes, key: bytes = b"") -> None:
    datagram = receiver.recv(65536)
    offset = 12 + len(topic.encode())
    timestamp = int.from_bytes(datagram[offset : offset + 8], "big", signed=True)
    assert datagram == encode_any_partition(topic, value, key, timestamp)


def test_functions_send_what_they_are_given(sock_path: Path, receiver: socket.socket) -> None:
    result = bash(
        "to_pulsar_send t hello k1 && to_pulsar_send t '--not an option' && "
        "to_pulsar_send t '' '' && printf 'a\\nb\\0' | to_pulsar_send_stdin t sk",
        sock_path,
    )
    assert result.returncode == 0, result.stderr
    recv_any(receiver, "t", b"hello", b"k1")
    recv_any(receiver, "t", b"--not an option")
    recv_any(receiver, "t", b"")
    recv_any(receiver, "t", b"a\nb\x00", b"sk")


def test_errors_are_return_codes(sock_path: Path) -> None:
    usage = bash("to_pulsar_send t", sock_path)
    assert usage.returncode == 2 and b"usage: to_pulsar_send TOPIC VALUE [KEY]" in usage.stderr
    assert bash("to_pulsar_send_stdin", sock_path).returncode == 2
    # No daemon: the CLI's one-line error and exit 1, and the caller's script goes on.
    missing = bash('to_pulsar_send t v || echo "failed with $?"', sock_path)
    assert missing.stdout == b"failed with 1\n"
    assert missing.stderr.decode().startswith("to_pulsar: error: no daemon listening on ")
    assert len(missing.stderr.splitlines()) == 1


def test_default_cli_is_to_pulsar_on_path(
    sock_path: Path, receiver: socket.socket, tmp_path: Path
) -> None:
    """Without TO_PULSAR_CLI the functions run ``to_pulsar`` from PATH (the console script)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "to_pulsar"  # stands in for the console script, whether installed or not
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m to_pulsar.cli "$@"\n')
    fake.chmod(0o755)
    result = bash(f'unset TO_PULSAR_CLI; PATH="{bin_dir}:$PATH"; to_pulsar_send t v k', sock_path)
    assert result.returncode == 0, result.stderr
    recv_any(receiver, "t", b"v", b"k")


def in_checkout(tmp_path: Path, with_venv: bool, commands: str, sock_path: Path):
    """Source a copy of the script as the README does (``. examples/shell/to_pulsar.sh``
    from a checkout's root), with no ``to_pulsar`` on PATH and TO_PULSAR_CLI unset."""
    assert BASH is not None
    checkout = tmp_path / "checkout"
    (checkout / "examples" / "shell").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / "examples" / "shell" / "to_pulsar.sh")
    if with_venv:  # what `make run` leaves: the console script in .venv/bin, not on PATH
        venv_bin = checkout / ".venv" / "bin"
        venv_bin.mkdir(parents=True)
        cli = venv_bin / "to_pulsar"
        cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m to_pulsar.cli "$@"\n')
        cli.chmod(0o755)
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "to_pulsar").exists()]
    env = {k: v for k, v in os.environ.items() if k != "TO_PULSAR_CLI"}
    env.update(
        PATH=os.pathsep.join(path),
        PYTHONPATH=str(ROOT / "client_lib"),
        **{SOCKET_ENV_VAR: str(sock_path)},
    )
    return subprocess.run(
        [BASH, "-c", f"set -u; . examples/shell/to_pulsar.sh; {commands}"],
        cwd=checkout, capture_output=True, env=env, timeout=60,
    )  # fmt: skip


def test_without_to_pulsar_on_path_the_checkouts_venv_cli_runs(
    sock_path: Path, receiver: socket.socket, tmp_path: Path
) -> None:
    result = in_checkout(tmp_path, True, "cd /; to_pulsar_send t v k", sock_path)
    assert result.returncode == 0, result.stderr
    recv_any(receiver, "t", b"v", b"k")


def test_without_any_cli_it_says_what_to_set(sock_path: Path, tmp_path: Path) -> None:
    result = in_checkout(tmp_path, False, 'to_pulsar_send t v || echo "status $?"', sock_path)
    assert result.stdout == b"status 127\n"
    stderr = result.stderr.decode()
    assert stderr.startswith("to_pulsar_send: no to_pulsar command: not on PATH nor at ")
    assert "/checkout/.venv/bin/to_pulsar" in stderr and "set TO_PULSAR_CLI" in stderr
    assert stderr.count("\n") == 1


@pytest.mark.broker
def test_through_daemon_and_broker(broker: Broker, start_daemon) -> None:
    daemon = start_daemon(broker.url)
    topic = f"shell-sender-{uuid.uuid4().hex[:10]}"
    result = bash(
        f'for i in 0 1 2; do to_pulsar_send {topic} "line $i" "key-$i" || exit; done; '
        f"to_pulsar_send {topic} no-key; "
        f"echo -n '{{\"a\":1}}' | to_pulsar_send_stdin {topic} json",
        daemon.socket_path,
    )
    assert result.returncode == 0, result.stderr
    counters = daemon.wait_settled(5)
    assert counters.acked == 5 and counters.identity_holds()

    messages = consume(broker.url, f"persistent://public/default/{topic}", 5)
    by_value = {m.value: m for m in messages}
    assert len(messages) == 5
    for i in range(3):
        assert by_value[f"line {i}".encode()].key == f"key-{i}"
    assert by_value[b"no-key"].key == ""
    assert by_value[b'{"a":1}'].key == "json"
    assert all(m.event_time > 1_600_000_000_000 for m in messages)
