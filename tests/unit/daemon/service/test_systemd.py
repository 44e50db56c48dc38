"""systemd integration (``service/systemd.py``): the notify protocol (NOTIFY_SOCKET datagrams,
watchdog interval, status line) and socket activation (sd_listen_fds: environment parsing and
passed-fd checks).

Real sockets are dup'ed to free high fd numbers and found there through the
``start`` parameter, so pytest's own fds 3, 4, ... are never touched.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pulsar_bruce.service.systemd import (
    STATUS_INTERVAL_S,
    ActivationError,
    Notifier,
    activated_socket,
    activated_sockets,
    listen_fds,
    notify,
    notify_address,
    socket_name,
    status_line,
    watchdog_interval_s,
)

# -- the notify protocol -----------------------------------------------------------------------


@pytest.fixture
def notify_socket() -> Iterator[tuple[str, socket.socket]]:
    """A datagram socket standing in for systemd's (short path: sun_path is 108 bytes)."""
    directory = tempfile.mkdtemp(prefix="sd-")
    path = os.path.join(directory, "notify")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(5)
    yield path, receiver
    receiver.close()
    Path(path).unlink(missing_ok=True)
    os.rmdir(directory)


def test_notify_sends_the_state_to_the_given_path(notify_socket) -> None:
    path, receiver = notify_socket
    assert notify("READY=1\nSTATUS=serving", address=path) is True
    assert receiver.recv(4096) == b"READY=1\nSTATUS=serving"


def test_notify_reads_notify_socket_from_the_environment(notify_socket, monkeypatch) -> None:
    path, receiver = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert notify("STOPPING=1") is True
    assert receiver.recv(4096) == b"STOPPING=1"


def test_notify_to_an_abstract_socket(monkeypatch) -> None:
    name = f"pulsar-bruce-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(b"\0" + name.encode())
        receiver.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("WATCHDOG=1") is True
        assert receiver.recv(4096) == b"WATCHDOG=1"


def test_notify_without_notify_socket_is_false(monkeypatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False


@pytest.mark.parametrize("address", ["", "relative/path", "vsock:2:1234"])
def test_unsupported_addresses_are_ignored(address: str) -> None:
    assert notify_address(address) is None
    assert notify("READY=1", address=address) is False


def test_notify_to_a_missing_socket_is_false_not_an_exception(tmp_path: Path) -> None:
    assert notify("READY=1", address=str(tmp_path / "nobody")) is False


def test_abstract_address_starts_with_a_nul_byte() -> None:
    assert notify_address("@sd/notify") == b"\0sd/notify"
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"


# -- watchdog --------------------------------------------------------------------------------


def test_watchdog_pings_at_half_the_interval() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "200000"}, pid=42) == pytest.approx(0.1)
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}, pid=42) == pytest.approx(15.0)


def test_watchdog_pid_must_be_ours_when_set() -> None:
    env = {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "42"}
    assert watchdog_interval_s(env, pid=42) == pytest.approx(0.1)
    assert watchdog_interval_s(env, pid=43) is None


@pytest.mark.parametrize("value", [None, "", "0", "-5", "soon"])
def test_no_watchdog_without_a_positive_watchdog_usec(value: str | None) -> None:
    env = {} if value is None else {"WATCHDOG_USEC": value}
    assert watchdog_interval_s(env, pid=42) is None


def test_tick_interval_is_the_status_interval_or_the_watchdog_interval() -> None:
    assert Notifier("/run/n", None).tick_s == STATUS_INTERVAL_S
    assert Notifier("/run/n", 0.1).tick_s == pytest.approx(0.1)
    assert Notifier("/run/n", 15.0).tick_s == STATUS_INTERVAL_S


def test_notifier_from_environ(notify_socket) -> None:
    path, _ = notify_socket
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}, pid=1)
    assert notifier.enabled and notifier.watchdog_s == pytest.approx(0.1)
    other = Notifier.from_environ({"NOTIFY_SOCKET": path, "WATCHDOG_PID": "2"}, pid=1)
    assert other.enabled and other.watchdog_s is None


def test_no_watchdog_without_a_notify_socket() -> None:
    notifier = Notifier.from_environ({"WATCHDOG_USEC": "200000"}, pid=1)
    assert not notifier.enabled and notifier.watchdog_s is None


# -- Notifier messages ---------------------------------------------------------------------------


def test_notifier_messages(notify_socket) -> None:
    path, receiver = notify_socket
    notifier = Notifier(path, 0.1)
    assert notifier.ready("receiving on x")
    assert receiver.recv(4096) == b"READY=1\nSTATUS=receiving on x"
    assert notifier.tick("still here")
    assert receiver.recv(4096) == b"STATUS=still here\nWATCHDOG=1"
    assert notifier.stopping("stopping")
    assert receiver.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_tick_without_watchdog_is_only_status(notify_socket) -> None:
    path, receiver = notify_socket
    assert Notifier(path, None).tick("hello")
    assert receiver.recv(4096) == b"STATUS=hello"


def test_disabled_notifier_does_nothing() -> None:
    notifier = Notifier(None, None)
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.tick("x") is False
    assert notifier.stopping("x") is False


def test_status_line() -> None:
    line = status_line("receiving on /run/pulsar-bruce/bruce.sock", 3, 1, 10, 6, 1)
    assert line == (
        "receiving on /run/pulsar-bruce/bruce.sock; 3 buffered; 1 broker connection;"
        " 10 received, 6 acked, 1 discarded"
    )
    assert "; 2 broker connections;" in status_line("stopping", 0, 2, 0, 0, 0)
    assert "; 0 broker connections;" in status_line("stopping", 0, 0, 0, 0, 0)
    assert "\n" not in line


def test_a_full_notify_socket_never_stalls_a_tick(notify_socket) -> None:
    """Periodic ticks run on the event loop: when nobody reads, they are dropped at once."""
    path, _ = notify_socket
    fillers = _fill(path)
    try:
        started = time.monotonic()
        assert Notifier(path, 0.1).tick("dropped") is False
        assert time.monotonic() - started < 0.1
        started = time.monotonic()
        assert notify("READY=1", address=path, timeout=0.05) is False
        assert 0.04 < time.monotonic() - started < 1.0
    finally:
        for filler in fillers:
            filler.close()


def _fill(path: str) -> list[socket.socket]:
    """Queue datagrams on ``path`` until even a fresh sender gets EAGAIN.

    A sender also stops at its own send buffer, so it takes several when
    net.unix.max_dgram_qlen is raised (the receiver's queue limit).
    """
    fillers: list[socket.socket] = []
    for _ in range(1000):
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        filler.setblocking(False)
        fillers.append(filler)
        sent = 0
        try:
            while True:
                filler.sendto(b"x", path)
                sent += 1
        except BlockingIOError:
            if sent == 0:
                return fillers
    raise AssertionError("could not fill the socket's queue")


# -- socket activation -------------------------------------------------------------------------


PID = 4242


def env(count: int, pid: int = PID, **extra: str) -> dict[str, str]:
    return {"LISTEN_PID": str(pid), "LISTEN_FDS": str(count), "HOME": "/", **extra}


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def free_fd_range(count: int) -> int:
    """The first of ``count`` consecutive unused fd numbers."""
    start = 600
    while any(_is_open(fd) for fd in range(start, start + count)):
        start += count
    return start


@pytest.fixture
def placed() -> Iterator[list[int]]:
    """Fds the test dup2'ed into place; closed at teardown if still open."""
    fds: list[int] = []
    yield fds
    for fd in fds:
        if _is_open(fd):
            os.close(fd)


def place(sockets: list[socket.socket], fds: list[int]) -> int:
    """dup2 ``sockets`` to consecutive free fds; returns the first one."""
    start = free_fd_range(len(sockets))
    for offset, sock in enumerate(sockets):
        os.dup2(sock.fileno(), start + offset)
        fds.append(start + offset)
        sock.close()
    return start


@pytest.fixture
def sock_dir() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="sd-")
    yield directory
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)


def bound_datagram_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    return sock


# -- environment ---------------------------------------------------------------------------------


def test_nothing_passed_without_listen_variables() -> None:
    assert listen_fds({"HOME": "/"}, pid=PID) == []


def test_listen_pid_of_another_process_means_nothing_was_passed() -> None:
    environ = env(1, pid=PID + 1)
    assert listen_fds(environ, pid=PID, start=free_fd_range(1)) == []
    assert "LISTEN_PID" not in environ and "LISTEN_FDS" not in environ


def test_zero_fds() -> None:
    assert listen_fds(env(0), pid=PID) == []


def test_variables_are_unset_so_children_do_not_inherit_them() -> None:
    environ = env(0, LISTEN_FDNAMES="bruce")
    listen_fds(environ, pid=PID)
    assert environ == {"HOME": "/"}


def test_variables_can_be_kept() -> None:
    environ = env(0)
    listen_fds(environ, pid=PID, unset=False)
    assert environ == env(0)


def test_defaults_to_os_environ_and_our_pid(monkeypatch) -> None:
    monkeypatch.setenv("LISTEN_PID", str(os.getpid()))
    monkeypatch.setenv("LISTEN_FDS", "0")
    assert listen_fds() == []
    assert "LISTEN_PID" not in os.environ and "LISTEN_FDS" not in os.environ


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"LISTEN_PID": "me", "LISTEN_FDS": "1"}, "LISTEN_PID"),
        ({"LISTEN_PID": str(PID), "LISTEN_FDS": "one"}, "LISTEN_FDS"),
        ({"LISTEN_PID": str(PID), "LISTEN_FDS": "-1"}, "LISTEN_FDS"),
    ],
)
def test_garbage_in_the_variables_is_a_clear_error(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ActivationError, match=named):
        listen_fds(environ, pid=PID)
    assert "LISTEN_PID" not in environ  # unset even on error


# -- passed fds ----------------------------------------------------------------------------------


def test_passed_datagram_socket_is_returned_and_works(sock_dir: str, placed: list[int]) -> None:
    path = os.path.join(sock_dir, "in.sock")
    start = place([bound_datagram_socket(path)], placed)
    [sock] = listen_fds(env(1), pid=PID, start=start)
    try:
        assert sock.fileno() == start
        assert sock.family == socket.AF_UNIX and sock.type == socket.SOCK_DGRAM
        assert not os.get_inheritable(start)  # FD_CLOEXEC, as sd_listen_fds sets it
        assert socket_name(sock) == path
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"queued", path)
        sock.settimeout(5)
        assert sock.recv(100) == b"queued"
    finally:
        sock.close()


def test_several_passed_sockets(sock_dir: str, placed: list[int]) -> None:
    paths = [os.path.join(sock_dir, f"{i}.sock") for i in range(3)]
    start = place([bound_datagram_socket(p) for p in paths], placed)
    sockets = listen_fds(env(3), pid=PID, start=start)
    try:
        assert [s.fileno() for s in sockets] == [start, start + 1, start + 2]
        assert [socket_name(s) for s in sockets] == paths
    finally:
        for sock in sockets:
            sock.close()


def test_a_connected_stream_socket_is_refused_and_left_open(placed: list[int]) -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    right.close()
    start = place([left], placed)
    with pytest.raises(
        ActivationError, match=rf"fd {start} is an AF_UNIX/SOCK_STREAM \(not listening\) socket"
    ):
        listen_fds(env(1), pid=PID, start=start)
    assert _is_open(start)


def test_a_datagram_and_a_listening_stream_socket_are_taken_apart(
    placed: list[int], tmp_path: Path
) -> None:
    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    datagram.bind(str(tmp_path / "d.sock"))
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind(str(tmp_path / "s.sock"))
    stream.listen()
    start = place([stream, datagram], placed)
    got_datagram, got_stream = activated_sockets(env(2), pid=PID, start=start)
    assert got_datagram is not None and got_datagram.type == socket.SOCK_DGRAM
    assert got_stream is not None and got_stream.type == socket.SOCK_STREAM
    got_datagram.detach()
    got_stream.detach()


def test_inet_socket_is_refused(placed: list[int]) -> None:
    start = place([socket.socket(socket.AF_INET, socket.SOCK_DGRAM)], placed)
    with pytest.raises(ActivationError, match=r"AF_INET/SOCK_DGRAM.*expected AF_UNIX/SOCK_DGRAM"):
        listen_fds(env(1), pid=PID, start=start)


def test_pipe_is_not_a_socket(placed: list[int]) -> None:
    read_end, write_end = os.pipe()
    start = free_fd_range(1)
    os.dup2(read_end, start)
    placed.append(start)
    os.close(read_end)
    os.close(write_end)
    with pytest.raises(ActivationError, match=rf"fd {start} is not an open socket"):
        listen_fds(env(1), pid=PID, start=start)


def test_missing_fd_is_a_clear_error() -> None:
    start = free_fd_range(1)
    with pytest.raises(ActivationError, match=rf"fd {start} is not an open socket"):
        listen_fds(env(1), pid=PID, start=start)


def test_good_sockets_before_a_bad_one_are_left_open(sock_dir: str, placed: list[int]) -> None:
    good = bound_datagram_socket(os.path.join(sock_dir, "good.sock"))
    bad = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    start = place([good, bad], placed)
    with pytest.raises(ActivationError, match=f"fd {start + 1}"):
        listen_fds(env(2), pid=PID, start=start)
    assert _is_open(start) and _is_open(start + 1)


# -- activated_socket ----------------------------------------------------------------------------


def test_activated_socket_is_none_without_activation() -> None:
    assert activated_socket({}, pid=PID) is None


def test_activated_socket_is_the_one_passed_socket(sock_dir: str, placed: list[int]) -> None:
    start = place([bound_datagram_socket(os.path.join(sock_dir, "one"))], placed)
    sock = activated_socket(env(1), pid=PID, start=start)
    assert sock is not None and sock.fileno() == start
    sock.close()


def test_activated_socket_refuses_more_than_one(sock_dir: str, placed: list[int]) -> None:
    start = place([bound_datagram_socket(os.path.join(sock_dir, f"{i}")) for i in (1, 2)], placed)
    with pytest.raises(ActivationError, match="passed 2 sockets; expected one"):
        activated_socket(env(2), pid=PID, start=start)


def test_socket_name_of_an_abstract_socket() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0pulsar-bruce-test-name")
        assert socket_name(sock) == "@pulsar-bruce-test-name"


def test_socket_name_of_a_path() -> None:
    directory = tempfile.mkdtemp(prefix="sd-")
    path = os.path.join(directory, "x.sock")
    try:
        with bound_datagram_socket(path) as sock:
            assert socket_name(sock) == path
    finally:
        os.unlink(path)
        os.rmdir(directory)
