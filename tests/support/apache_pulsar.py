"""Apache Pulsar standalone (the Java broker) for tests, ``make run PULSAR=apache`` and bench/.

The broker comes from Maven Central: ``tests/apache_pulsar/pom.xml`` pins the
release, Maven resolves its classpath once (cached under ``~/.cache`` by the
pom's hash), and each :class:`ApachePulsar` runs
``org.apache.pulsar.PulsarStandaloneStarter`` in a JVM of its own, with a
configuration written for that run: free ports, its own data directory, one
bookie (ensemble and quorums of 1), ``NoopLoadManager``, small caches.  It is
ready when the admin REST API lists ``public/default``.  :class:`Admin` wraps
the REST calls the tests need.  Nothing here sleeps to synchronise: every wait
polls a condition until a deadline.

Run as ``python -m tests.support.apache_pulsar classpath`` to resolve (and
cache) the classpath, or ``... serve DIR`` to run one broker in the foreground.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.processes import ProcessError, free_port, port_open, wait_for

POM_DIR = Path(__file__).resolve().parents[1] / "apache_pulsar"
POM = POM_DIR / "pom.xml"
LOG4J_CONF = POM_DIR / "log4j2.xml"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pulsar-bruce"

#: What the distribution's ``bin/pulsar`` passes to Java 17 (Netty, BookKeeper, JVM metrics).
JVM_OPENS = (
    "java.base/java.io",
    "java.base/java.util.zip",
    "java.base/java.nio",
    "java.base/jdk.internal.misc",
    "java.base/sun.net",
    "java.management/sun.management",
)
JVM_PROPERTIES = {
    "io.netty.tryReflectionSetAccessible": "true",
    "java.net.preferIPv4Stack": "true",
    "jute.maxbuffer": "10485760",
    "log4j2.is.webapp": "false",
    "bookkeeper.metadata.bookie.drivers": (
        "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver"
    ),
    "bookkeeper.metadata.client.drivers": (
        "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver"
    ),
}

#: The broker settings every run gets (``extra_config`` adds to or overrides them).
BASE_CONFIG: dict[str, str] = {
    "clusterName": "standalone",
    "advertisedAddress": "127.0.0.1",
    "bindAddress": "127.0.0.1",
    "managedLedgerDefaultEnsembleSize": "1",
    "managedLedgerDefaultWriteQuorum": "1",
    "managedLedgerDefaultAckQuorum": "1",
    "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
    "allowAutoTopicCreation": "true",
    "allowAutoTopicCreationType": "non-partitioned",
    "defaultNumPartitions": "1",
    "brokerDeleteInactiveTopicsEnabled": "false",
    "brokerDeduplicationEnabled": "false",
    "transactionCoordinatorEnabled": "false",
    "systemTopicEnabled": "true",
    "topicLevelPoliciesEnabled": "true",
    "webSocketServiceEnabled": "false",
    "functionsWorkerEnabled": "false",
    "managedLedgerCacheSizeMB": "64",
    "dbStorage_writeCacheMaxSizeMb": "32",
    "dbStorage_readAheadCacheMaxSizeMb": "32",
    "dbStorage_rocksDB_blockCacheSize": "16777216",
    "journalDirectory": "data/bookkeeper/journal",
    "ledgerDirectories": "data/bookkeeper/ledgers",
    "journalSyncData": "false",
    "httpServerEnabled": "false",
    "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
    "exposeTopicLevelMetricsInPrometheus": "false",
    # Backlog quotas checked every second, not every minute (the backlog quota tests).
    "backlogQuotaCheckIntervalInSeconds": "1",
}


class JavaMissing(ProcessError):
    """No ``java`` or ``mvn``: Apache Pulsar cannot run here."""


def missing_tools() -> str | None:
    """One line naming what this machine lacks to run Apache Pulsar, or None."""
    lacking = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if not lacking:
        return None
    return (
        f"Apache Pulsar standalone needs {' and '.join(lacking)} on PATH (OpenJDK 17 and "
        "Maven with Maven Central): e.g. apt-get install openjdk-17-jdk-headless maven"
    )


def classpath() -> str:
    """The broker's classpath: resolved by Maven once per pom, then read from the cache."""
    problem = missing_tools()
    if problem:
        raise JavaMissing(problem)
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    cached = CACHE_DIR / f"apache-pulsar-classpath-{digest}.txt"
    if cached.exists() and all(Path(jar).exists() for jar in cached.read_text().split(os.pathsep)):
        return cached.read_text()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    command = [
        "mvn", "-B", "-q", "-f", str(POM), "dependency:build-classpath",
        f"-Dmdep.outputFile={partial}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0 or not partial.exists():
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line]
        raise ProcessError(
            "Maven could not resolve Apache Pulsar's classpath from tests/apache_pulsar/pom.xml: "
            + (errors[0] if errors else result.stderr.strip()[-500:])
        )
    partial.replace(cached)
    return cached.read_text()


def java_command(heap: str, direct_memory: str = "512m") -> list[str]:
    """``java`` with the classpath, heap and flags every Pulsar JVM here gets; the main class
    and its arguments follow."""
    opens = [arg for module in JVM_OPENS for arg in ("--add-opens", f"{module}=ALL-UNNAMED")]
    properties = [f"-D{key}={value}" for key, value in JVM_PROPERTIES.items()]
    return [
        "java",
        f"-Xms{heap}",
        f"-Xmx{heap}",
        f"-XX:MaxDirectMemorySize={direct_memory}",
        "-XX:+UseG1GC",
        "-cp",
        classpath(),
        *opens,
        *properties,
        f"-Dlog4j.configurationFile={LOG4J_CONF}",
    ]


def render_config(settings: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class ApachePulsar:
    """One standalone broker (with its bookie and metadata store) on free ports.

    Restartable on the same ports and data (``kill`` then ``start``), so tests can
    take it down mid-stream.  ``extra_config`` adds broker settings (auth, TLS, ...).
    """

    def __init__(
        self,
        workdir: Path,
        extra_config: Mapping[str, str] | None = None,
        heap: str = "768m",
        *,
        port: int | None = None,
        web_port: int | None = None,
    ):
        """``port`` / ``web_port``: the broker's and the admin API's ports (default: free ones,
        picked here; ``make run PULSAR=apache`` fixes the broker's at 6650)."""
        self.workdir = workdir
        self.port = port or free_port()
        self.web_port = web_port or free_port()
        self.bookie_port = free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.heap = heap
        self.settings = dict(BASE_CONFIG)
        self.settings["brokerServicePort"] = str(self.port)
        self.settings["webServicePort"] = str(self.web_port)
        self.settings.update(extra_config or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.admin = Admin(self.web_url, self.settings.get("brokerClientAuthenticationParameters"))
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "standalone.conf").write_text(render_config(self.settings))

    @property
    def tls_url(self) -> str:
        """``pulsar+ssl://`` on ``brokerServicePortTls`` (which ``extra_config`` must set)."""
        return f"pulsar+ssl://127.0.0.1:{self.settings['brokerServicePortTls']}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    def command(self) -> list[str]:
        return [
            *java_command(self.heap),
            "org.apache.pulsar.PulsarStandaloneStarter",
            "--config", "standalone.conf",
            "--no-functions-worker",
            "--no-stream-storage",
            "--bookkeeper-port", str(self.bookie_port),
            "--metadata-dir", "data/metadata",
            "--bookkeeper-dir", "data/bookkeeper",
        ]  # fmt: skip

    def start(self, timeout: float = 120.0) -> None:
        command = self.command()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=self.workdir, stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )
        wait_for(self._ready, timeout, f"Apache Pulsar to serve (log: {self.log_path})")

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise ProcessError(f"Apache Pulsar exited with {self.process.returncode}:\n{tail}")
        return serving(self.admin, self.port, self.web_port)

    @property
    def pid(self) -> int:
        if self.process is None:
            raise ProcessError("Apache Pulsar is not running")
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: the broker (and its bookie) vanish without closing anything."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
            self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def remove_data(self) -> None:
        """Delete the metadata store's and the bookie's data (after kill or stop: hundreds of
        MB after a busy run), keeping the log and the configuration."""
        shutil.rmtree(self.workdir / "data", ignore_errors=True)


class AdminError(Exception):
    """The admin REST API answered with an error status."""

    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


#: What a broker answers (HTTP 412, 500 or 503) while a bundle is being unloaded, split or
#: loaded, seen under load: ``Namespace bundle public/ns/0x20000000_0x40000000 is being
#: unloaded`` (500), and, for a namespace unload right after a split, ``Invalid upper boundary
#: for bundle ...0x00000000_0x40000000. Expected upper boundary of ...0x00000000_0x20000000``
#: (412: the broker's bundle cache still had the bundles before the split).  The same call
#: succeeds once that is over.
BUSY = (
    "is being unloaded",
    "Please redo the lookup",
    "not served by this instance",
    "Invalid upper boundary for bundle",
)
#: How long a call is retried while the bundle is busy.
BUSY_TIMEOUT_S = 60.0


def serving(admin: Admin, port: int, web_port: int) -> bool:
    """A broker is ready: both its ports accept and its admin API lists ``public/default``."""
    if not port_open(web_port) or not port_open(port):
        return False
    try:
        return "public/default" in admin.get("/admin/v2/namespaces/public")
    except (OSError, AdminError):
        return False


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` (or a short name) -> ``persistent/t/ns/x`` for REST paths."""
    if "://" not in topic:
        topic = f"persistent://public/default/{topic}"
    domain, rest = topic.split("://", 1)
    return f"{domain}/{rest}"


class Admin:
    """The few admin REST calls the tests use (``/admin/v2``), as a superuser when a token
    is given (``brokerClientAuthenticationParameters`` of the form ``token:...``)."""

    def __init__(self, web_url: str, auth_params: str | None = None, cluster: str = "standalone"):
        self.web_url = web_url
        self.token = auth_params.removeprefix("token:") if auth_params else None
        self.cluster = cluster

    def call(self, method: str, path: str, body: Any = None) -> str:
        """One REST call.  A change (any method but GET) is retried while the broker answers
        that the bundle is between owners or splits (:data:`BUSY`), for up to
        :data:`BUSY_TIMEOUT_S`, as a ``pulsar-admin`` user would: an unload or a split still
        under way makes the next change on that bundle fail until it is over (seen on a loaded
        machine).  Reads are not: their callers poll them (readiness, stats)."""
        if method == "GET":
            return self._call_once(method, path, body)
        outcome: list[str] = []
        last: list[AdminError] = []

        def answered() -> bool:
            try:
                outcome.append(self._call_once(method, path, body))
            except AdminError as exc:
                if exc.status not in (412, 500, 503) or not any(t in exc.body for t in BUSY):
                    raise
                last[:] = [exc]
                return False
            return True

        try:
            wait_for(answered, BUSY_TIMEOUT_S, f"{method} {path} to be answered")
        except ProcessError:
            raise last[0] from None
        return outcome[0]

    def _call_once(self, method: str, path: str, body: Any) -> str:
        """One REST call; a broker that does not own the bundle answers 307 with the owner's
        address, followed here with the same method and body (urllib follows GETs only)."""
        data = None if body is None else json.dumps(body).encode()
        url = self.web_url + path
        for _ in range(5):
            request = urllib.request.Request(url, data=data, method=method)
            request.add_header("Content-Type", "application/json")
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return str(response.read().decode())
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location")
                if exc.code in (307, 308) and location:
                    url = location
                    continue
                raise AdminError(exc.code, exc.read().decode(errors="replace")) from exc
        raise AdminError(307, f"too many redirects for {method} {path}")

    def get(self, path: str) -> str:
        return self.call("GET", path)

    def get_json(self, path: str) -> Any:
        return json.loads(self.get(path))

    # -- tenants, namespaces, topics ------------------------------------------------------

    def create_tenant(self, tenant: str, admin_roles: list[str] | None = None) -> None:
        info = {"adminRoles": admin_roles or [], "allowedClusters": [self.cluster]}
        self.call("PUT", f"/admin/v2/tenants/{tenant}", info)

    def create_namespace(self, namespace: str, policies: dict[str, Any] | None = None) -> None:
        self.call("PUT", f"/admin/v2/namespaces/{namespace}", policies or {})

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        self.call("PUT", f"/admin/v2/{topic_path(topic)}/partitions", partitions)

    def update_partitions(self, topic: str, partitions: int) -> None:
        self.call("POST", f"/admin/v2/{topic_path(topic)}/partitions", partitions)

    def create_topic(self, topic: str) -> None:
        self.call("PUT", f"/admin/v2/{topic_path(topic)}")

    def unload(self, topic: str) -> None:
        self.call("PUT", f"/admin/v2/{topic_path(topic)}/unload")

    def terminate(self, topic: str) -> None:
        self.call("POST", f"/admin/v2/{topic_path(topic)}/terminate")

    def topic_stats(self, topic: str) -> Any:
        return self.get_json(f"/admin/v2/{topic_path(topic)}/stats")

    def internal_stats(self, topic: str) -> Any:
        """The managed ledger's view: ``numberOfEntries`` counts broker entries (batches)."""
        return self.get_json(f"/admin/v2/{topic_path(topic)}/internalStats")

    def partitioned_stats(self, topic: str) -> Any:
        return self.get_json(f"/admin/v2/{topic_path(topic)}/partitioned-stats?perPartition=true")

    # -- policies -------------------------------------------------------------------------

    def set_retention(self, namespace: str, minutes: int = 60, size_mb: int = 1024) -> None:
        """Keep acknowledged (and, on a topic with no subscription yet, all) messages: without
        it the broker deletes a closed ledger no subscription needs (an unload closes one)."""
        policy = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}
        self.call("POST", f"/admin/v2/namespaces/{namespace}/retention", policy)

    def set_deduplication(self, namespace: str, enabled: bool = True) -> None:
        self.call("POST", f"/admin/v2/namespaces/{namespace}/deduplication", enabled)

    def set_backlog_quota(self, namespace: str, limit_bytes: int, policy: str) -> None:
        """``policy``: ``producer_exception``, ``producer_request_hold`` or
        ``consumer_backlog_eviction``."""
        quota = {"limitSize": limit_bytes, "limitTime": -1, "policy": policy}
        self.call(
            "POST",
            f"/admin/v2/namespaces/{namespace}/backlogQuota?backlogQuotaType=destination_storage",
            quota,
        )

    def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        self.call("POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", actions)

    def set_auto_topic_creation(self, namespace: str, allowed: bool) -> None:
        override = {"allowAutoTopicCreation": allowed, "topicType": "non-partitioned"}
        self.call("POST", f"/admin/v2/namespaces/{namespace}/autoTopicCreation", override)

    def set_max_message_size(self, topic: str, size: int) -> None:
        self.call("POST", f"/admin/v2/{topic_path(topic)}/maxMessageSize", size)

    def set_max_producers(self, topic: str, count: int) -> None:
        self.call("POST", f"/admin/v2/{topic_path(topic)}/maxProducers", count)


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "classpath":
        try:
            entries = classpath().split(os.pathsep)
        except ProcessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"Apache Pulsar classpath: {len(entries)} jars (cached in {CACHE_DIR})")
        return 0
    if len(argv) >= 2 and argv[0] == "serve":
        broker = ApachePulsar(Path(argv[1]).resolve())
        try:
            broker.start()
        except ProcessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            broker.kill()
            return 1
        print(f"Apache Pulsar standalone: {broker.url} (admin {broker.web_url})", flush=True)
        try:
            assert broker.process is not None
            broker.process.wait()
        except KeyboardInterrupt:
            broker.stop()
        return 0
    print("usage: python -m tests.support.apache_pulsar classpath | serve DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
