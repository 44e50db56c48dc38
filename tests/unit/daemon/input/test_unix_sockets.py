"""Both socket files, datagram and stream, are created the same way: mode, group, safe
directory, a stale file replaced, a live socket or a non-socket refused."""

from __future__ import annotations

import asyncio
import grp
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pulsar_bruce.input.stream_server import StreamServer
from pulsar_bruce.input.unix_sockets import (
    InsecureSocketDirectoryError,
    SocketInUseError,
    check_socket_directory,
    open_unix_socket,
)
from pulsar_bruce.model.group_lookup import group_id

from tests.unit.daemon.input.helpers import Stage

KINDS = [
    pytest.param(socket.SOCK_DGRAM, id="datagram"),
    pytest.param(socket.SOCK_STREAM, id="stream"),
]


def other_group() -> grp.struct_group | None:
    """A group we may give a file to (any, as root; else one of ours) other than our primary."""
    mine = os.getgid()
    if os.geteuid() == 0:
        candidates = [g for g in grp.getgrall() if g.gr_gid != mine]
    else:
        candidates = [grp.getgrgid(gid) for gid in os.getgroups() if gid != mine]
    return candidates[0] if candidates else None


@pytest.fixture
def opened() -> Iterator[list[socket.socket]]:
    """Sockets a test opened, closed at its end."""
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_file_gets_the_mode_and_the_socket_its_kind(
    tmp_path: Path, kind: socket.SocketKind, opened: list[socket.socket]
) -> None:
    path = tmp_path / "bruce.sock"
    sock = open_unix_socket(str(path), kind, 0o660)
    opened.append(sock)
    info = path.stat()
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o660
    assert info.st_gid == os.getegid()
    assert sock.type == kind and sock.family == socket.AF_UNIX
    assert not sock.getblocking()


@pytest.mark.parametrize("kind", KINDS)
def test_the_file_is_given_to_the_group(
    tmp_path: Path, kind: socket.SocketKind, opened: list[socket.socket]
) -> None:
    group = other_group()
    if group is None:
        pytest.skip("no group other than our primary one to give the socket to")
    path = tmp_path / "bruce.sock"
    opened.append(open_unix_socket(str(path), kind, 0o660, group.gr_name))
    info = path.stat()
    assert info.st_gid == group.gr_gid
    assert stat.S_IMODE(info.st_mode) == 0o660


@pytest.mark.parametrize("kind", KINDS)
def test_a_numeric_group_id_works_too(
    tmp_path: Path, kind: socket.SocketKind, opened: list[socket.socket]
) -> None:
    group = other_group()
    if group is None:
        pytest.skip("no group other than our primary one to give the socket to")
    assert group_id(str(group.gr_gid)) == group.gr_gid
    path = tmp_path / "bruce.sock"
    opened.append(open_unix_socket(str(path), kind, 0o640, str(group.gr_gid)))
    assert path.stat().st_gid == group.gr_gid
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_group_at_bind_leaves_no_socket_behind(
    tmp_path: Path, kind: socket.SocketKind
) -> None:
    path = tmp_path / "bruce.sock"
    with pytest.raises(PermissionError, match=r"cannot give .* to group 'no-such-group-xyz'"):
        open_unix_socket(str(path), kind, 0o660, "no-such-group-xyz")
    assert not path.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_world_writable_directory_without_sticky_bit_is_refused(
    tmp_path: Path, kind: socket.SocketKind
) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    path = directory / "bruce.sock"
    with pytest.raises(InsecureSocketDirectoryError) as caught:
        open_unix_socket(str(path), kind, 0o660)
    message = str(caught.value)
    assert str(directory) in message and "world-writable without the sticky bit" in message
    assert "\n" not in message
    assert not path.exists()
    assert isinstance(caught.value, PermissionError)  # the CLI turns it into exit 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_world_writable_directory_with_sticky_bit_is_fine(
    tmp_path: Path, kind: socket.SocketKind
) -> None:
    directory = tmp_path / "sticky"
    directory.mkdir()
    directory.chmod(0o1777)
    check_socket_directory(str(directory / "bruce.sock"))
    open_unix_socket(str(directory / "bruce.sock"), kind, 0o660).close()


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o700, 0o1775])
def test_directories_only_we_can_write_are_fine(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    directory.chmod(mode)
    check_socket_directory(str(directory / "bruce.sock"))


def test_a_group_writable_directory_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o775)  # anyone in its group could replace the socket
    with pytest.raises(InsecureSocketDirectoryError) as caught:
        check_socket_directory(str(directory / "bruce.sock"))
    message = str(caught.value)
    assert "group-writable without the sticky bit" in message and "chmod go-w" in message
    assert "\n" not in message


def _stat_owned_by(uid: int, mode: int) -> Callable[..., os.stat_result]:
    real_stat = os.stat

    def fake_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        info = real_stat(path, *args, **kwargs)
        if not stat.S_ISDIR(info.st_mode):
            return info
        fields = list(info)
        fields[stat.ST_UID], fields[stat.ST_MODE] = uid, stat.S_IFDIR | mode
        return os.stat_result(fields)

    return fake_stat


@pytest.mark.parametrize("kind", KINDS)
def test_a_directory_owned_by_another_user_is_refused(
    tmp_path: Path, kind: socket.SocketKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = 4242 if os.geteuid() != 4242 else 4243
    directory = tmp_path / "theirs"
    directory.mkdir()
    monkeypatch.setattr(os, "stat", _stat_owned_by(other, 0o755))
    path = directory / "bruce.sock"
    with pytest.raises(InsecureSocketDirectoryError) as caught:
        open_unix_socket(str(path), kind, 0o660)
    message = str(caught.value)
    assert f"belongs to uid {other}" in message or f"(uid {other})" in message
    assert "owned by root" in message and "\n" not in message
    assert not path.exists()


def test_a_directory_owned_by_root_is_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "stat", _stat_owned_by(0, 0o755))
    check_socket_directory(str(tmp_path / "bruce.sock"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_directory_is_created(
    tmp_path: Path, kind: socket.SocketKind, opened: list[socket.socket]
) -> None:
    path = tmp_path / "run" / "pulsar-bruce" / "bruce.sock"
    opened.append(open_unix_socket(str(path), kind, 0o660))
    assert stat.S_ISSOCK(path.stat().st_mode)


def leave_stale_socket(path: Path, kind: socket.SocketKind) -> None:
    """A socket file whose owner is gone (a crashed daemon's)."""
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(str(path))
    sock.close()
    assert stat.S_ISSOCK(path.lstat().st_mode)


@pytest.mark.parametrize("stale_kind", KINDS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_stale_socket_file_is_replaced(
    tmp_path: Path,
    kind: socket.SocketKind,
    stale_kind: socket.SocketKind,
    opened: list[socket.socket],
) -> None:
    path = tmp_path / "bruce.sock"
    leave_stale_socket(path, stale_kind)
    os.chmod(path, 0o777)
    sock = open_unix_socket(str(path), kind, 0o600)
    opened.append(sock)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sock.getsockname() == str(path)


def live_socket(path: Path, kind: socket.SocketKind) -> socket.socket:
    """Another process's socket, receiving or accepting at ``path``."""
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(str(path))
    if kind == socket.SOCK_STREAM:
        sock.listen(1)
    return sock


@pytest.mark.parametrize(
    ("live_kind", "verb"),
    [(socket.SOCK_DGRAM, "receiving"), (socket.SOCK_STREAM, "accepting")],
    ids=["datagram", "stream"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_live_socket_is_refused_and_left_alone(
    tmp_path: Path,
    kind: socket.SocketKind,
    live_kind: socket.SocketKind,
    verb: str,
    opened: list[socket.socket],
) -> None:
    path = tmp_path / "bruce.sock"
    other = live_socket(path, live_kind)
    opened.append(other)
    inode = path.lstat().st_ino
    with pytest.raises(SocketInUseError, match=f"^another process is {verb} on {path}$"):
        open_unix_socket(str(path), kind, 0o660)
    assert path.lstat().st_ino == inode


def test_a_listener_with_a_full_backlog_is_in_use_not_a_hang(
    tmp_path: Path, opened: list[socket.socket]
) -> None:
    path = tmp_path / "bruce.sock"
    listener = live_socket(path, socket.SOCK_STREAM)
    opened.append(listener)
    for _ in range(8):  # fill the backlog of 1 (the kernel allows a little more)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.setblocking(False)
        opened.append(client)
        try:
            client.connect(str(path))
        except BlockingIOError:
            break
    else:
        pytest.fail("the backlog never filled")
    with pytest.raises(SocketInUseError, match="another process is accepting on"):
        open_unix_socket(str(path), socket.SOCK_STREAM, 0o660)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("make", ["file", "directory", "symlink"])
def test_a_path_that_is_not_a_socket_is_refused(
    tmp_path: Path, kind: socket.SocketKind, make: str
) -> None:
    path = tmp_path / "bruce.sock"
    if make == "file":
        path.write_text("precious")
    elif make == "directory":
        path.mkdir()
    else:
        leave_stale_socket(tmp_path / "elsewhere.sock", kind)
        path.symlink_to(tmp_path / "elsewhere.sock")
    with pytest.raises(SocketInUseError, match="exists and is not a socket; refusing to replace"):
        open_unix_socket(str(path), kind, 0o660)
    assert path.is_symlink() if make == "symlink" else path.exists()
    if make == "file":
        assert path.read_text() == "precious"


# -- the stream server listens on the socket created this way -----------------------------------


def stream_server(path: Path, group: str | None) -> StreamServer:
    forwarder: Any = SimpleNamespace(max_message_bytes=1 << 20)  # only read per connection
    return StreamServer(str(path), 0o620, forwarder, Stage(), group=group)


def test_the_stream_server_listens_on_a_socket_with_mode_and_group(tmp_path: Path) -> None:
    group = other_group()
    gid = os.getegid() if group is None else group.gr_gid
    path = tmp_path / "run" / "bruce.stream.sock"

    async def scenario() -> None:
        server = stream_server(path, None if group is None else group.gr_name)
        await server.start()
        info = path.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o620, gid)
        _, writer = await asyncio.open_unix_connection(str(path))
        writer.close()
        await writer.wait_closed()
        await server.stop()
        assert not path.exists()

    asyncio.run(scenario())


def test_the_stream_server_refuses_an_insecure_directory_and_a_live_socket(
    tmp_path: Path, opened: list[socket.socket]
) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    taken = tmp_path / "taken.sock"
    opened.append(live_socket(taken, socket.SOCK_STREAM))

    async def scenario() -> None:
        with pytest.raises(InsecureSocketDirectoryError):
            await stream_server(directory / "bruce.stream.sock", None).start()
        with pytest.raises(SocketInUseError, match="another process is accepting on"):
            await stream_server(taken, None).start()

    asyncio.run(scenario())
    assert not (directory / "bruce.stream.sock").exists()
    assert taken.exists()
