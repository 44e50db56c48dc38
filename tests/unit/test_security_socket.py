"""The socket file (mode, group, a safe directory) and the metrics address warning."""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

import pytest
from pulsar_bruce.connection.security import is_loopback, metrics_exposure_warning
from pulsar_bruce.input.socket_reader import (
    InsecureSocketDirectoryError,
    check_socket_directory,
    open_datagram_socket,
)
from pulsar_bruce.model.groups import group_id


def other_group() -> grp.struct_group | None:
    """A group we may give a file to (any, as root; else one of ours) other than our primary."""
    mine = os.getgid()
    if os.geteuid() == 0:
        candidates = [g for g in grp.getgrall() if g.gr_gid != mine]
    else:
        candidates = [grp.getgrgid(gid) for gid in os.getgroups() if gid != mine]
    return candidates[0] if candidates else None


def test_the_default_mode_is_0660_without_a_group(tmp_path: Path) -> None:
    path = tmp_path / "bruce.sock"
    sock = open_datagram_socket(str(path), 0o660)
    try:
        info = path.stat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o660
    finally:
        sock.close()


def test_the_socket_file_is_given_to_the_group(tmp_path: Path) -> None:
    group = other_group()
    if group is None:
        pytest.skip("no group other than our primary one to give the socket to")
    path = tmp_path / "bruce.sock"
    sock = open_datagram_socket(str(path), 0o660, group.gr_name)
    try:
        info = path.stat()
        assert info.st_gid == group.gr_gid
        assert stat.S_IMODE(info.st_mode) == 0o660
    finally:
        sock.close()


def test_a_numeric_group_id_works_too(tmp_path: Path) -> None:
    group = other_group()
    if group is None:
        pytest.skip("no group other than our primary one to give the socket to")
    assert group_id(str(group.gr_gid)) == group.gr_gid
    path = tmp_path / "bruce.sock"
    open_datagram_socket(str(path), 0o640, str(group.gr_gid)).close()
    assert path.stat().st_gid == group.gr_gid
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_an_unknown_group_at_bind_leaves_no_socket_behind(tmp_path: Path) -> None:
    path = tmp_path / "bruce.sock"
    with pytest.raises(PermissionError, match=r"cannot give .* to group 'no-such-group-xyz'"):
        open_datagram_socket(str(path), 0o660, "no-such-group-xyz")
    assert not path.exists()


def test_a_world_writable_directory_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    path = directory / "bruce.sock"
    with pytest.raises(InsecureSocketDirectoryError) as caught:
        open_datagram_socket(str(path), 0o660)
    message = str(caught.value)
    assert str(directory) in message and "world-writable without the sticky bit" in message
    assert "\n" not in message
    assert not path.exists()
    assert isinstance(caught.value, PermissionError)  # the CLI turns it into exit 1


def test_a_world_writable_directory_with_sticky_bit_is_fine(tmp_path: Path) -> None:
    directory = tmp_path / "sticky"
    directory.mkdir()
    directory.chmod(0o1777)
    check_socket_directory(str(directory / "bruce.sock"))
    open_datagram_socket(str(directory / "bruce.sock"), 0o660).close()


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o775, 0o700])
def test_directories_not_writable_by_everyone_are_fine(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    directory.chmod(mode)
    check_socket_directory(str(directory / "bruce.sock"))


# -- metrics address ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)
    assert metrics_exposure_warning((host, 9090)) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "192.168.0.1"])
def test_non_loopback_addresses_warn(host: str) -> None:
    assert not is_loopback(host)
    warning = metrics_exposure_warning((host, 9090))
    assert warning is not None
    assert warning.startswith("metrics and status are reachable from the network")


def test_metrics_off_is_no_exposure() -> None:
    assert metrics_exposure_warning(None) is None
