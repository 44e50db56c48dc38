"""A three-broker Apache Pulsar cluster for tests, ``make run PULSAR=cluster`` and bench/.

What users run, small: ZooKeeper (``ZooKeeperServerMain``), one bookie
(BookKeeper's ``server.Main``), the cluster's metadata written by
``PulsarClusterMetadataSetup``, then three ``PulsarBrokerStarter`` brokers, each
a JVM of its own on free ports, from the classpath of ``apache_pulsar.py``.  No
broker runs in standalone mode: a standalone broker answers lookups with
"connect through the service URL", which a service URL naming several brokers
cannot honour.  Namespaces get 4 bundles, so topics spread over the brokers;
the modular load manager places them (shedding off unless asked for, so
bundles move only when a test moves them; no broker counted as overloaded,
since all share one host).

A broker can be SIGKILLed (:meth:`ClusterBroker.kill`), stopped gracefully
(SIGTERM: it hands its bundles over first) and started again on the same
ports and data.  The metadata store's session timeout is 10 s (Pulsar's
default 30 s): a SIGKILLed broker's bundles are released that much sooner, so
the failover tests take 20 s less each; the daemon's behaviour does not depend
on it.

Run as ``python -m tests.support.apache_cluster serve DIR [PORT WEB_PORT]`` to
run one in the foreground (``make run PULSAR=cluster``); SIGTERM or SIGINT stops
it, and its data goes with it.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tests.support.apache_pulsar import (
    BASE_CONFIG,
    Admin,
    java_command,
    render_config,
    serving,
    topic_path,
)
from tests.support.processes import ProcessError, port_open, quiet_port, wait_for

CLUSTER_NAME = "bruce-cluster"
BUNDLES = 4

#: Broker settings on top of ``BASE_CONFIG`` (the standalone's) for a cluster member.
CLUSTER_CONFIG: dict[str, str] = {
    "clusterName": CLUSTER_NAME,
    "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    "loadBalancerSheddingEnabled": "false",
    # The brokers share one host, so its CPU says nothing about which is busier; under load a
    # broker measured over the default 85% counts as overloaded and gets no bundle, so one
    # measured just under it got every bundle of a fresh namespace (2 of 10 runs with CPU hogs;
    # ``LeastLongTermMessageRate.getScore``).  Never overloaded: placement by message rate.
    "loadBalancerBrokerOverloadedThresholdPercentage": "1000",
    "defaultNumberOfNamespaceBundles": str(BUNDLES),
    "metadataStoreSessionTimeoutMillis": "10000",
    # A broker stopped with SIGTERM unloads its bundles, then exits (a rolling restart).
    "brokerShutdownTimeoutMs": "20000",
    "managedLedgerCacheSizeMB": "32",
}

_BOOKIE_CONFIG = {
    "advertisedAddress": "127.0.0.1",
    "allowLoopback": "true",
    "useHostNameAsBookieID": "false",
    "journalDirectories": "data/journal",
    "ledgerDirectories": "data/ledgers",
    "httpServerEnabled": "false",
    "journalSyncData": "false",
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "dbStorage_writeCacheMaxSizeMb": "32",
    "dbStorage_readAheadCacheMaxSizeMb": "32",
    "dbStorage_rocksDB_blockCacheSize": "16777216",
    "diskUsageThreshold": "0.99",
    "diskUsageWarnThreshold": "0.98",
    "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
}


class JavaProcess:
    """One JVM with its log file in ``workdir``; restartable with the same command."""

    def __init__(self, name: str, workdir: Path, command: list[str]):
        self.name = name
        self.workdir = workdir
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None
        #: Stopped with SIGSTOP (:meth:`pause`) and not yet resumed.
        self.paused = False
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def launch(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.workdir, stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ProcessError(
                f"{self.name} exited with {self.process.returncode}:\n{self.log()[-3000:]}"
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: gone without closing anything."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(30)
            self.process = None
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: still there (its sockets accept, its sessions stay open) but silent, as a
        JVM in a long garbage collection or a disk that stalls every write."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.process is not None and self.paused:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM, and SIGKILL if it is not gone within ``timeout``."""
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
            self.process = None


class ClusterBroker(JavaProcess):
    """One ``PulsarBrokerStarter`` of the cluster."""

    def __init__(self, index: int, workdir: Path, settings: Mapping[str, str], heap: str):
        self.index = index
        self.port = int(settings["brokerServicePort"])
        self.web_port = int(settings["webServicePort"])
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.admin = Admin(self.web_url, cluster=CLUSTER_NAME)
        super().__init__(
            f"broker{index}",
            workdir,
            [
                *java_command(heap, "256m"),
                "org.apache.pulsar.PulsarBrokerStarter",
                "--broker-conf",
                "broker.conf",
            ],
        )
        (workdir / "broker.conf").write_text(render_config(settings))

    def start(self, timeout: float = 120.0) -> None:
        self.launch()
        wait_for(self.ready, timeout, f"{self.name} to serve (log: {self.log_path})")

    def ready(self) -> bool:
        self.check_alive()
        return serving(self.admin, self.port, self.web_port)


class ApacheCluster:
    """ZooKeeper, one bookie and ``brokers`` brokers on free ports under ``workdir``.

    ``url`` names every broker (``pulsar://h:p1,h:p2,h:p3``), as a user's service URL
    does; ``admin`` talks to the first broker that is up (it follows redirects to the
    bundle's owner).
    """

    def __init__(
        self,
        workdir: Path,
        brokers: int = 3,
        extra_config: Mapping[str, str] | None = None,
        heap: str = "384m",
        *,
        port: int | None = None,
        web_port: int | None = None,
    ):
        """``port`` / ``web_port``: the first broker's ports, the others' follow (default:
        free ones; ``make run PULSAR=cluster`` puts the brokers at 6650, 6651, 6652)."""
        self.workdir = workdir
        self.zk_port = quiet_port()
        self.bookie_port = quiet_port()
        self.metadata_url = f"zk:127.0.0.1:{self.zk_port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.zookeeper = JavaProcess(
            "zookeeper",
            workdir / "zookeeper",
            [
                *java_command("128m", "64m"),
                "-Dzookeeper.admin.enableServer=false",  # its Jetty would take port 8080
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(self.zk_port),
                str(workdir / "zookeeper" / "data"),
            ],
        )
        bookie_settings = dict(_BOOKIE_CONFIG)
        bookie_settings["bookiePort"] = str(self.bookie_port)
        bookie_settings["metadataServiceUri"] = f"zk+null://127.0.0.1:{self.zk_port}/ledgers"
        self.bookie = JavaProcess(
            "bookie",
            workdir / "bookie",
            [*java_command("256m", "256m"), "org.apache.bookkeeper.server.Main", "--conf",
             "bookie.conf"],
        )  # fmt: skip
        (workdir / "bookie" / "bookie.conf").write_text(render_config(bookie_settings))
        self.brokers: list[ClusterBroker] = []
        for index in range(brokers):
            settings = dict(BASE_CONFIG)
            settings.update(CLUSTER_CONFIG)
            settings["metadataStoreUrl"] = self.metadata_url
            settings["configurationMetadataStoreUrl"] = self.metadata_url
            settings["brokerServicePort"] = str(port + index if port else quiet_port())
            settings["webServicePort"] = str(web_port + index if web_port else quiet_port())
            settings.update(extra_config or {})
            self.brokers.append(ClusterBroker(index, workdir / f"broker{index}", settings, heap))
        self._metadata_written = False
        hosts = ",".join(f"127.0.0.1:{broker.port}" for broker in self.brokers)
        self.url = f"pulsar://{hosts}"
        self.web_urls = ",".join(f"127.0.0.1:{broker.web_port}" for broker in self.brokers)

    # -- start and stop ------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> None:
        """ZooKeeper, the cluster's metadata (once), the bookie, then the brokers (in parallel);
        after :meth:`kill`, the same cluster again on its ports and data."""
        self.start_storage()
        for broker in self.brokers:
            broker.launch()
        for broker in self.brokers:
            wait_for(broker.ready, timeout, f"{broker.name} to serve (log: {broker.log_path})")

    def start_storage(self) -> None:
        """ZooKeeper and the bookie, each unless it runs, on their ports and data (after
        :meth:`kill_storage`, or at the first start, with the cluster's metadata written)."""
        if not self.zookeeper.running:
            self.zookeeper.launch()
            wait_for(self._zookeeper_up, 60, f"ZooKeeper (log: {self.zookeeper.log_path})")
        if not self._metadata_written:
            self._initialize_metadata()
            self._metadata_written = True
        if not self.bookie.running:
            self.bookie.launch()
            wait_for(self._bookie_up, 90, f"the bookie (log: {self.bookie.log_path})")

    def kill_storage(self) -> None:
        """ZooKeeper and the bookie SIGKILLed: the brokers lose their metadata store and every
        write at once (:meth:`start_storage` brings both back)."""
        self.zookeeper.kill()
        self.bookie.kill()

    def _zookeeper_up(self) -> bool:
        self.zookeeper.check_alive()
        return port_open(self.zk_port)

    def _bookie_up(self) -> bool:
        self.bookie.check_alive()
        return port_open(self.bookie_port)

    def _initialize_metadata(self) -> None:
        first = self.brokers[0]
        command = [
            *java_command("128m", "64m"),
            "org.apache.pulsar.PulsarClusterMetadataSetup",
            "--cluster", CLUSTER_NAME,
            "--metadata-store", self.metadata_url,
            "--configuration-metadata-store", self.metadata_url,
            "--web-service-url", f"http://{self.web_urls}",
            "--broker-service-url", self.url,
            "--default-namespace-bundle-number", str(BUNDLES),
        ]  # fmt: skip
        log_path = self.workdir / "metadata-setup.log"
        with log_path.open("ab") as log:
            result = subprocess.run(
                command, cwd=self.workdir, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                timeout=120, check=False,
            )  # fmt: skip
        if result.returncode != 0:
            raise ProcessError(
                f"PulsarClusterMetadataSetup exited with {result.returncode} "
                f"(broker {first.url}):\n{log_path.read_text(errors='replace')[-3000:]}"
            )

    def kill(self) -> None:
        """Everything, at once (teardown)."""
        for broker in self.brokers:
            broker.kill()
        self.bookie.kill()
        self.zookeeper.kill()

    # -- what tests ask ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The first broker's JVM (the bench's broker CPU column is that broker's)."""
        process = self.brokers[0].process
        if process is None:
            raise ProcessError("the cluster is not running")
        return process.pid

    def stop(self) -> None:
        """The brokers (SIGTERM: each unloads its bundles), then the bookie and ZooKeeper."""
        for broker in self.brokers:
            broker.stop()
        self.bookie.stop()
        self.zookeeper.stop()

    @property
    def processes(self) -> list[JavaProcess]:
        return [self.zookeeper, self.bookie, *self.brokers]

    @property
    def running_brokers(self) -> list[ClusterBroker]:
        return [broker for broker in self.brokers if broker.running]

    @property
    def admin(self) -> Admin:
        running = self.running_brokers
        if not running:
            raise ProcessError("no broker of the cluster is running")
        return running[0].admin

    def owner(self, topic: str) -> str:
        """The service URL of the broker that owns ``topic`` (a partition or a plain topic)."""
        answer = json.loads(self.admin.get(f"/lookup/v2/topic/{topic_path(topic)}"))
        return str(answer["brokerUrl"])

    def owners(self, topics: list[str]) -> dict[str, str]:
        return {topic: self.owner(topic) for topic in topics}

    def broker_at(self, url: str) -> ClusterBroker:
        for broker in self.brokers:
            if broker.url == url:
                return broker
        raise ProcessError(f"no broker of the cluster at {url}")

    def bundles(self, namespace: str) -> list[str]:
        """``0x00000000_0x40000000``, ... : the namespace's bundle ranges."""
        boundaries: list[str] = self.admin.get_json(f"/admin/v2/namespaces/{namespace}/bundles")[
            "boundaries"
        ]
        return [f"{low}_{high}" for low, high in itertools.pairwise(boundaries)]

    def unload_namespace(self, namespace: str) -> None:
        self.admin.call("PUT", f"/admin/v2/namespaces/{namespace}/unload")

    def split_bundle(self, namespace: str, bundle: str) -> None:
        self.admin.call("PUT", f"/admin/v2/namespaces/{namespace}/{bundle}/split?unload=true")

    def logs(self, tail: int = 30) -> str:
        """The brokers' warnings and errors (the last ``tail`` of each), for failure messages."""
        parts = []
        for broker in self.brokers:
            lines = [
                line for line in broker.log().splitlines() if " WARN " in line or " ERROR " in line
            ]
            parts.append(f"--- {broker.name} ({broker.url}):\n" + "\n".join(lines[-tail:]))
        return "\n".join(parts)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    if len(argv) in (2, 4) and argv[0] == "serve":
        ports = [int(port) for port in argv[2:]] or [None, None]
        signal.signal(signal.SIGTERM, _stop)
        cluster = ApacheCluster(Path(argv[1]).resolve(), port=ports[0], web_port=ports[1])
        try:
            cluster.start()
            admin = ", ".join(broker.web_url for broker in cluster.brokers)
            print(f"Apache Pulsar cluster: {cluster.url} (admin {admin})", flush=True)
            while all(process.running for process in cluster.processes):
                time.sleep(0.5)
            gone = [process.name for process in cluster.processes if not process.running]
            print(f"error: {', '.join(gone)} exited; see {cluster.workdir}", file=sys.stderr)
            return 1
        except ProcessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            pass
        finally:
            cluster.kill()
        return 0
    print("usage: python -m tests.support.apache_cluster serve DIR [PORT WEB_PORT]",
          file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
