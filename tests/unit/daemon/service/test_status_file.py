"""The file beside the socket that tells ``pulsar-bruce status`` where the daemon serves."""

from __future__ import annotations

from pathlib import Path

from pulsar_bruce.service import status_file


def test_written_beside_the_socket_and_removed_only_by_its_writer(tmp_path: Path) -> None:
    sock = str(tmp_path / "bruce.sock")
    assert status_file.read(sock) is None
    assert status_file.write(sock, "http://127.0.0.1:9090/status")
    assert (tmp_path / "bruce.status-url").read_text() == "http://127.0.0.1:9090/status\n"
    assert status_file.read(sock) == "http://127.0.0.1:9090/status"
    status_file.remove(sock, "http://127.0.0.1:9999/status")  # a later daemon's: kept
    assert status_file.read(sock) == "http://127.0.0.1:9090/status"
    status_file.remove(sock, "http://127.0.0.1:9090/status")
    assert not (tmp_path / "bruce.status-url").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left either


def test_a_directory_that_does_not_take_it_is_no_error(tmp_path: Path) -> None:
    assert not status_file.write(str(tmp_path / "missing" / "bruce.sock"), "http://h:1/status")


def test_urls_of_wildcard_and_ipv6_listen_addresses() -> None:
    assert status_file.status_url("0.0.0.0", 9090) == "http://127.0.0.1:9090/status"
    assert status_file.status_url("::", 9090) == "http://[::1]:9090/status"
    assert status_file.status_url("::1", 1) == "http://[::1]:1/status"
    assert status_file.status_url("10.0.0.5", 2) == "http://10.0.0.5:2/status"
