"""The broker a bench runs on, behind one interface: pulsar-lite or Apache Pulsar.

``--broker lite`` (the default) is the pulsar-lite binary; ``--broker apache`` is the
real Java broker, Apache Pulsar standalone (``tests/support/apache_pulsar.py``: the
release pinned in ``tests/apache_pulsar/pom.xml``, one JVM with its bookie and
metadata store); ``both`` measures on one, then the other, in the same run;
``--broker cluster`` is a three-broker Apache Pulsar cluster
(``tests/support/apache_cluster.py``), the service URL naming all three.

Either kind gives ``url``, ``pid`` (the broker process: for Apache Pulsar the JVM, so
the broker CPU column is the whole standalone), ``start``, ``stop``, ``kill``,
``restart`` (kill, then start on the same ports and data) and
``make_partitioned(topic, n)``.  pulsar-lite auto-creates every topic with its
configured ``default_partitions``, so one instance serves one partition count and
:class:`Brokers` runs one per count; Apache Pulsar auto-creates non-partitioned
topics and gets partitioned ones through its admin API, so one JVM serves every
count.  Only one broker of a run is up at a time, so an idle one costs the measured
one no CPU.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tests.support.processes import Broker as LiteProcess
from tests.support.processes import ProcessError

if TYPE_CHECKING:
    from tests.support.apache_pulsar import Admin

KINDS = ("lite", "apache", "cluster")
CHOICES = (*KINDS, "both")


def kinds(choice: str) -> list[str]:
    """``both`` -> pulsar-lite, then Apache Pulsar standalone."""
    return ["lite", "apache"] if choice == "both" else [choice]


class BrokerProcess(Protocol):
    """What both process classes offer (``tests/support``)."""

    url: str

    @property
    def pid(self) -> int: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...


class BenchBroker(ABC):
    """One broker process a bench drives."""

    kind: str
    label: str
    process: BrokerProcess

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without closing anything."""
        self.process.kill()

    def restart(self) -> None:
        """Kill, then start again on the same ports and data."""
        self.kill()
        self.start()

    def entries_added(self, topic: str, partitions: int) -> int | None:
        """Entries (one per batch, or per unbatched message) the broker has written to
        ``topic`` so far, from its managed ledgers' ``entriesAddedCounter``; None where the
        broker does not say (pulsar-lite)."""
        return None

    @abstractmethod
    def serves(self, partitions: int) -> bool:
        """Whether :meth:`make_partitioned` can give a topic ``partitions`` here."""

    @abstractmethod
    def make_partitioned(self, topic: str, partitions: int) -> None:
        """Have ``topic`` exist with ``partitions`` partitions (1: one non-partitioned or
        single-partition topic) before anyone produces to it."""


class LiteBroker(BenchBroker):
    """pulsar-lite: every topic auto-created with ``default_partitions``."""

    kind = "lite"

    def __init__(self, workdir: Path, partitions: int):
        self.process = LiteProcess(workdir, partitions=partitions)
        self.partitions = partitions
        self.label = f"pulsar-lite {_version('pulsar-lite')}"

    def serves(self, partitions: int) -> bool:
        return max(partitions, 1) == max(self.partitions, 1)

    def make_partitioned(self, topic: str, partitions: int) -> None:
        if not self.serves(partitions):
            raise ProcessError(
                f"pulsar-lite here auto-creates topics with {self.partitions} partition(s), "
                f"not {partitions} ({topic})"
            )


class ApacheBroker(BenchBroker):
    """Apache Pulsar standalone: one JVM; partitioned topics made with the admin API."""

    kind = "apache"

    def __init__(self, workdir: Path):
        from tests.support.apache_pulsar import POM, ApachePulsar

        self.process = ApachePulsar(workdir)
        version = re.search(r"<pulsar.version>([^<]+)<", POM.read_text())
        self.label = f"Apache Pulsar {version.group(1) if version else '?'} standalone (JVM)"

    def serves(self, partitions: int) -> bool:
        return True

    def make_partitioned(self, topic: str, partitions: int) -> None:
        if partitions > 1:  # 0 or 1: auto-created non-partitioned on first use
            self.process.admin.create_partitioned_topic(topic, partitions)

    def entries_added(self, topic: str, partitions: int) -> int | None:
        return ledger_entries(self.process.admin, topic, partitions)


class ClusterBroker(BenchBroker):
    """A three-broker Apache Pulsar cluster (``tests/support/apache_cluster.py``): the
    service URL names all three; the broker CPU column is the first broker's JVM."""

    kind = "cluster"

    def __init__(self, workdir: Path):
        from tests.support.apache_cluster import ApacheCluster
        from tests.support.apache_pulsar import POM

        self.process = self.cluster = ApacheCluster(workdir)
        version = re.search(r"<pulsar.version>([^<]+)<", POM.read_text())
        self.label = f"Apache Pulsar {version.group(1) if version else '?'}, three brokers"

    def serves(self, partitions: int) -> bool:
        return True

    def make_partitioned(self, topic: str, partitions: int) -> None:
        if partitions > 1:
            self.cluster.admin.create_partitioned_topic(topic, partitions)

    def entries_added(self, topic: str, partitions: int) -> int | None:
        return ledger_entries(self.cluster.admin, topic, partitions)


def ledger_entries(admin: Admin, topic: str, partitions: int) -> int:
    """Sum of ``entriesAddedCounter`` over the topic's partitions (0 before any exists)."""
    from tests.support.apache_pulsar import AdminError

    names = [f"{topic}-partition-{i}" for i in range(partitions)] if partitions > 1 else [topic]
    total = 0
    for name in names:
        try:
            total += int(admin.internal_stats(name).get("entriesAddedCounter", 0))
        except AdminError as error:
            if error.status != 404:
                raise
    return total


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


class Brokers:
    """The brokers of one kind for one run, started on demand, one up at a time.

    ``get(partitions)`` returns a running broker that serves that partition count,
    stopping the previous one if it does not (pulsar-lite); ``on_start`` runs once for
    each broker started (the bench's warm-up)."""

    def __init__(
        self, kind: str, workdir: Path, on_start: Callable[[BenchBroker], None] | None = None
    ):
        if kind not in KINDS:
            raise ValueError(f"unknown broker kind {kind!r}")
        self.kind = kind
        self.workdir = workdir
        self.on_start = on_start
        self.current: BenchBroker | None = None

    def get(self, partitions: int) -> BenchBroker:
        if self.current is not None and self.current.serves(partitions):
            return self.current
        self.stop()
        broker: BenchBroker
        if self.kind == "lite":
            broker = LiteBroker(self.workdir / f"lite-{partitions}", partitions)
        elif self.kind == "cluster":
            broker = ClusterBroker(self.workdir / "cluster")
        else:
            broker = ApacheBroker(self.workdir / "apache")
        started = time.monotonic()
        broker.start()
        print(f"  {broker.label}: {broker.url}, up in {time.monotonic() - started:.1f} s")
        self.current = broker
        if self.on_start is not None:
            self.on_start(broker)
        return broker

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None
