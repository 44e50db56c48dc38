"""``to_pulsar`` as a load generator: --count/--interval-us, progress, --value-size, Ctrl-C.

Run as subprocesses against real sockets; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import to_pulsar
from to_pulsar import encode_any_partition, encode_partition_key

CLIENT_LIB = Path(to_pulsar.__file__).resolve().parents[1]

PROGRESS = re.compile(r"sent (\d+)/(\d+) \((\d+)%\)  (\d+) msg/s  (\d+\.\d) s *")
SUMMARY = re.compile(r"sent (\d+) messages in (\d+\.\d\d) s \((\d+) msg/s\)")
INTERRUPTED = re.compile(
    r"to_pulsar: interrupted: sent (\d+) of (\d+) messages in (\d+\.\d\d) s \((\d+) msg/s\)"
)
STOP = b"\x00stop-draining"


@pytest.fixture
def receiver(sock_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(10)
    yield sock
    sock.close()


class Drain:
    """Receive on a bound socket in a thread, so a long run never fills the socket queue."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.datagrams: list[bytes] = []
        self.first = threading.Event()  # set once a datagram has arrived
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(60)
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        while (datagram := self.sock.recv(1 << 20)) != STOP:
            self.datagrams.append(datagram)
            self.first.set()

    def stop(self) -> list[bytes]:
        """Everything received: the sender has exited, so STOP queues behind its datagrams."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(STOP, str(self.path))
        self.thread.join(60)
        assert not self.thread.is_alive()
        self.sock.close()
        return self.datagrams


@pytest.fixture
def drain(sock_path: Path) -> Iterator[Drain]:
    drain = Drain(sock_path)
    yield drain
    if drain.thread.is_alive():
        drain.stop()


def cli_env() -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(CLIENT_LIB), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath}


CLI = [sys.executable, "-m", "to_pulsar.cli"]


def run_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, env=cli_env(), timeout=120
    )


def run_with_tty_stderr(*args: str) -> tuple[int, bytes, str]:
    """Run the CLI with a pseudo-terminal as stderr: (exit code, stdout, stderr as text)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*CLI, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=cli_env(),
        )
    finally:
        os.close(slave)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, "no output from the CLI for 60 s"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    proc.stdout.close()
    # The terminal's line discipline turns "\n" into "\r\n".
    return proc.wait(60), stdout, output.decode().replace("\r\n", "\n")


def parse_progress(stderr: str, total: int) -> tuple[list[tuple[int, float]], str]:
    """Split ``\\r line \\r line ... \\n rest``: check each line, return (sent, elapsed)s + rest."""
    assert stderr.startswith("\r"), repr(stderr)
    bar, rest = stderr.split("\n", 1)
    draws = []
    for line in bar.split("\r")[1:]:
        match = PROGRESS.fullmatch(line)
        assert match, repr(line)
        sent, of, percent = int(match[1]), int(match[2]), int(match[3])
        assert of == total
        assert percent == sent * 100 // total
        draws.append((sent, float(match[5])))
    assert [sent for sent, _ in draws] == sorted(sent for sent, _ in draws)
    assert [elapsed for _, elapsed in draws] == sorted(elapsed for _, elapsed in draws)
    return draws, rest


def assert_summary(line: str, count: int) -> float:
    match = SUMMARY.fullmatch(line)
    assert match, repr(line)
    assert int(match[1]) == count
    elapsed, rate = float(match[2]), int(match[3])
    if elapsed >= 0.05:  # rounding makes the rate of a very short run meaningless to check
        assert abs(rate - count / elapsed) <= 0.1 * rate + 1
    return elapsed


# -- progress ------------------------------------------------------------------------------


def test_forced_progress_into_a_pipe(sock_path: Path, drain: Drain) -> None:
    """Paced at 10 ms for 40 messages: a few \\r redraws, at most ~10 a second, then a summary."""
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v", "--timestamp", "3",
        "--count", "40", "--interval-us", "10000", "--progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert drain.stop() == [encode_any_partition("t", b"v", b"", 3)] * 40
    draws, rest = parse_progress(result.stderr.decode(), 40)
    assert draws[-1][0] == 40  # the final redraw shows everything sent
    assert len(draws) >= 2
    summary, end = rest.split("\n")
    assert end == ""
    elapsed = assert_summary(summary, 40)
    assert elapsed >= 0.39  # 39 gaps of 10 ms
    # Redraws at least PROGRESS_PERIOD (0.1 s) apart, plus the final one.
    assert len(draws) <= elapsed / 0.1 + 2.5  # + 0.5: the summary rounds elapsed


def test_forced_progress_unpaced(sock_path: Path, drain: Drain) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
        "--count", "20000", "--progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    datagrams = drain.stop()
    assert len(datagrams) == 20000
    # Default timestamp: now, per message (re-encoded when the millisecond changes).
    stamps = [int.from_bytes(d[13:21], "big", signed=True) for d in datagrams]
    assert stamps == sorted(stamps)
    expected = [encode_any_partition("t", b"v", b"", ts) for ts in stamps]
    assert datagrams == expected
    draws, rest = parse_progress(result.stderr.decode(), 20000)
    assert draws[-1][0] == 20000
    summary, end = rest.split("\n")
    assert end == ""
    assert_summary(summary, 20000)


def test_auto_progress_is_silent_without_a_tty(sock_path: Path, drain: Drain) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v", "--count", "3000"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == result.stderr == b""
    assert len(drain.stop()) == 3000


def test_no_progress_overrides_force(sock_path: Path, drain: Drain) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v", "--count", "50",
        "--progress", "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    assert len(drain.stop()) == 50


def test_auto_progress_on_a_tty(sock_path: Path, drain: Drain) -> None:
    code, stdout, stderr = run_with_tty_stderr(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v", "--count", "5000"
    )
    assert code == 0, stderr
    assert stdout == b""
    assert len(drain.stop()) == 5000
    draws, rest = parse_progress(stderr, 5000)
    assert draws[-1][0] == 5000
    assert_summary(rest.removesuffix("\n"), 5000)


@pytest.mark.parametrize(
    "args", [["--count", "1"], ["--count", "50", "--no-progress"]], ids=["single", "no-progress"]
)
def test_tty_without_progress(sock_path: Path, drain: Drain, args: list[str]) -> None:
    code, stdout, stderr = run_with_tty_stderr(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v", *args
    )
    assert code == 0, stderr
    assert stdout == b""
    assert stderr == ""
    assert len(drain.stop()) == int(args[1])


# -- --value-size --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 5000, 100_000])
def test_value_size_sends_values_of_that_size(sock_path: Path, drain: Drain, size: int) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value-size", str(size),
        "--timestamp", "9", "--count", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    datagrams = drain.stop()
    assert datagrams == [encode_any_partition("t", b"x" * size, b"", 9)] * 3
    value_size = int.from_bytes(datagrams[0][-size - 4 : len(datagrams[0]) - size], "big")
    assert value_size == size


def test_value_size_with_key_and_partition_key(sock_path: Path, receiver: socket.socket) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value_size", "64",
        "--key", "k", "--partition-key", "7", "--timestamp", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert receiver.recv(65536) == encode_partition_key(7, "t", b"x" * 64, b"k", 1)


# -- exit codes ----------------------------------------------------------------------------


def one_line_error(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("to_pulsar: error: ")
    assert stderr.count("\n") == 1, stderr
    return stderr


def test_exit_0_when_all_sent(sock_path: Path, drain: Drain) -> None:
    result = run_cli("--socket-path", str(sock_path), "--topic", "t", "--value-size", "10")
    assert result.returncode == 0, result.stderr
    assert len(drain.stop()) == 1


def test_exit_1_daemon_unavailable_during_load(sock_path: Path) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
        "--count", "100", "--progress",
    )  # fmt: skip
    assert "no daemon listening" in one_line_error(result, 1)  # failed before any progress


def test_exit_1_too_large_during_load_says_how_many_were_sent(
    sock_path: Path, receiver: socket.socket
) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value-size", "1000000",
        "--count", "3",
    )  # fmt: skip
    stderr = one_line_error(result, 1)
    assert "too large" in stderr
    assert "(after sending 0 of 3 messages)" in stderr


def test_exit_1_with_progress_ends_the_progress_line_first(
    sock_path: Path, receiver: socket.socket
) -> None:
    result = run_cli(
        "--socket-path", str(sock_path), "--topic", "t", "--value-size", "1000000",
        "--count", "3", "--progress",
    )  # fmt: skip
    assert result.returncode == 1
    draws, rest = parse_progress(result.stderr.decode(), 3)
    assert draws[-1][0] == 0
    assert rest.startswith("to_pulsar: error: ")
    assert rest.count("\n") == 1
    assert "Traceback" not in rest


@pytest.mark.parametrize(
    "args",
    [
        ["--value-size", "3", "--value", "v"],
        ["--value-size", "3", "--stdin"],
        ["--value-size", "-1"],
        ["--interval-us", "-1", "--value", "v"],
        ["--progress", "--value"],
    ],
)
def test_exit_2_usage_errors(sock_path: Path, args: list[str]) -> None:
    result = run_cli("--socket-path", str(sock_path), "--topic", "t", *args)
    one_line_error(result, 2)


# -- Ctrl-C --------------------------------------------------------------------------------


def _default_sigint() -> None:
    """A parent that ignores SIGINT (e.g. a non-interactive shell's background job) passes
    that on, and Python keeps it ignored; the CLI under test must see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("progress", ["--no-progress", "--progress"])
def test_sigint_prints_summary_and_exits_130(
    sock_path: Path, receiver: socket.socket, progress: str
) -> None:
    proc = subprocess.Popen(
        [
            *CLI, "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
            "--timestamp", "1", "--count", "1000000", "--interval-us", "20000", progress,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        preexec_fn=_default_sigint,
    )  # fmt: skip
    try:
        first = receiver.recv(65536)  # the run is under way
        proc.send_signal(signal.SIGINT)
        stdout, stderr_bytes = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = stderr_bytes.decode()
    assert proc.returncode == 130, stderr
    assert stdout == b""
    assert "Traceback" not in stderr
    if progress == "--progress":
        _, stderr = parse_progress(stderr, 1_000_000)
    summary, end = stderr.split("\n")
    assert end == ""
    match = INTERRUPTED.fullmatch(summary)
    assert match, repr(summary)
    reported, total = int(match[1]), int(match[2])
    assert total == 1_000_000
    receiver.settimeout(0)
    received = [first]
    while True:
        try:
            received.append(receiver.recv(65536))
        except BlockingIOError:
            break
    assert set(received) == {encode_any_partition("t", b"v", b"", 1)}
    # Exact, even though Ctrl-C lands right after the first send returned.
    assert reported == len(received)


def test_sigint_unpaced_counts_exactly(sock_path: Path, drain: Drain) -> None:
    """As fast as possible: Ctrl-C lands mid-send, the summary still matches what arrived."""
    proc = subprocess.Popen(
        [
            *CLI, "--socket-path", str(sock_path), "--topic", "t", "--value", "v",
            "--count", "100000000",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        preexec_fn=_default_sigint,
    )  # fmt: skip
    try:
        assert drain.first.wait(60), "no datagram arrived"
        proc.send_signal(signal.SIGINT)
        stdout, stderr_bytes = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = stderr_bytes.decode()
    assert proc.returncode == 130, stderr
    assert stdout == b""
    match = INTERRUPTED.fullmatch(stderr.removesuffix("\n"))
    assert match, repr(stderr)
    assert int(match[1]) == len(drain.stop())
