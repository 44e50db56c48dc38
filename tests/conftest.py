"""Shared fixtures: a real pulsar-lite broker, a real daemon process.

The processes themselves live in ``tests/support/processes.py`` (the bench uses them too).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.apache_cluster import ApacheCluster
from tests.support.apache_pulsar import ApachePulsar, missing_tools
from tests.support.processes import Broker, Daemon
from tests.support.senders import datagram_receiver, short_socket_path


def pytest_report_header() -> str:
    """Which intake this pass tests (``make test`` runs the suite once per intake)."""
    from pulsar_bruce.native import INTAKE_DESCRIPTION

    return f"pulsar-bruce intake: {INTAKE_DESCRIPTION}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Apache Pulsar tests are part of the suite: without Java or Maven, stop with one line."""
    if any(item.get_closest_marker("apache") for item in items):
        problem = missing_tools()
        if problem:
            pytest.exit(problem, returncode=3)


@pytest.fixture(scope="session")
def apache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApachePulsar]:
    """One Apache Pulsar standalone for the whole run (use unique topic names)."""
    instance = ApachePulsar(tmp_path_factory.mktemp("apache-pulsar"))
    try:
        instance.start()
        yield instance
    finally:
        instance.kill()
        instance.remove_data()


@pytest.fixture(scope="module")
def apache_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheCluster]:
    """One three-broker Apache Pulsar cluster for a test module (unique namespaces; a test
    that stops or kills a broker starts it again before it ends); gone after the module, so
    its five JVMs do not slow the rest of the run."""
    instance = ApacheCluster(tmp_path_factory.mktemp("apache-cluster"))
    try:
        instance.start()
        yield instance
    finally:
        instance.kill()


@pytest.fixture
def start_apache(tmp_path: Path) -> Iterator[Callable[..., ApachePulsar]]:
    """``start_apache(extra_config)`` -> an Apache Pulsar of this test's own (to restart, kill,
    or run with other settings), killed at teardown."""
    started: list[ApachePulsar] = []

    def start(extra_config: dict[str, str] | None = None) -> ApachePulsar:
        instance = ApachePulsar(tmp_path / f"apache{len(started)}", extra_config)
        started.append(instance)
        instance.start()
        return instance

    yield start
    for instance in started:
        instance.kill()
        instance.remove_data()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A shared broker whose auto-created topics have 4 partitions (use unique topic names)."""
    instance = Broker(tmp_path_factory.mktemp("broker4"), partitions=4)
    instance.start()
    yield instance
    instance.stop()
    instance.remove_data()


@pytest.fixture(scope="session")
def flat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A shared broker whose auto-created topics are not partitioned."""
    instance = Broker(tmp_path_factory.mktemp("broker0"), partitions=0)
    instance.start()
    yield instance
    instance.stop()
    instance.remove_data()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker for one test (for tests that kill or restart it)."""
    instance = Broker(tmp_path / "broker", partitions=4)
    instance.start()
    yield instance
    instance.kill()
    instance.remove_data()


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """``start_daemon(service_url, *args)`` -> a running :class:`Daemon`, killed at teardown;
    ``restart_of=daemon``: on the stopped ``daemon``'s paths (its socket, so its producer
    names, as a restarted service would)."""
    started: list[Daemon] = []

    def start(service_url: str, *extra_args: str, restart_of: Daemon | None = None) -> Daemon:
        if restart_of is not None:
            workdir = restart_of.workdir
        else:
            workdir = tmp_path / f"daemon{len(started)}"
            workdir.mkdir()
        daemon = Daemon(workdir, service_url, list(extra_args))
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


# -- senders ---------------------------------------------------------------------------------


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    """A socket path short enough for sun_path (108 bytes) even with a deep tmp_path."""
    with short_socket_path(tmp_path) as path:
        yield path


@pytest.fixture
def receiver(sock_path: Path) -> Iterator[socket.socket]:
    """A datagram socket bound at ``sock_path``, standing in for the daemon."""
    with datagram_receiver(sock_path) as sock:
        yield sock
