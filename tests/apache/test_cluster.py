"""The cluster users run: three Apache Pulsar brokers, bundles that move, brokers that die.

Every scenario runs the daemon (its defaults) and the control, the official
Python client used as an application would for speed, side by side on the same
topic at the same rate, so both meet the same unloads, splits and broker
failures at the same moments; values carry a prefix per producer.  The topic is
read back with the official client.  With deduplication on, the daemon's target
is 0 lost, 0 discards and 0 stored twice; the client's figures are reported next
to it (``-rA`` or the terminal summary), not asserted.  How long each producer
took to be back on the partition's new owner is measured from the partition's
stats and reported, never asserted (no timing assertion in a test).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support.apache_cluster import ApacheCluster
from tests.support.apache_pulsar import AdminError
from tests.support.processes import Counters, Daemon, wait_for
from tests.support.readback import (
    Outcome,
    ReadBack,
    SteadySender,
    assert_exactly_once,
    client_sender,
    read_back,
    unique,
)

pytestmark = [pytest.mark.apache, pytest.mark.timeout(300)]

PARTITIONS = 8
RATE = 400  # per second, per producer
#: The daemon's only settings: batching shorter than the defaults, so a failure finds many
#: batches in flight; everything about retries and timeouts is the default.
DAEMON_ARGS = ("--batch-max-messages", "20", "--batch-max-delay-ms", "5")
#: The figures each scenario reports, printed in the terminal summary (tests/apache/conftest.py).
REPORT: list[str] = []


def namespace(cluster: ApacheCluster, deduplication: bool) -> str:
    """A namespace of the test's own. With retention: the topics have no subscription until
    they are read back, and the broker deletes the ledgers an unload closes otherwise."""
    name = f"public/{unique('cluster')}"
    cluster.admin.create_namespace(name)
    cluster.admin.set_deduplication(name, deduplication)
    cluster.admin.set_retention(name)
    return name


def partitioned_topic(cluster: ApacheCluster, ns: str, prefix: str) -> str:
    topic = f"persistent://{ns}/{unique(prefix)}"
    cluster.admin.create_partitioned_topic(topic, PARTITIONS)
    return topic


def partition(topic: str, index: int) -> str:
    return f"{topic}-partition-{index}"


def evidence(daemon: Daemon, cluster: ApacheCluster) -> str:
    return f"\n--- daemon log tail:\n{daemon.log()[-4000:]}\n{cluster.logs()}"


# -- recovery: when each producer is back on a partition's new owner ---------------------------


@dataclass
class Recovery:
    """Polls the stats of ``partitions`` from ``start`` on: when each was served again after
    a failure (the bundle moved or was loaded again), and when each kind of producer (the
    daemon's, by name prefix, and the control's) was back on it."""

    cluster: ApacheCluster
    partitions: list[str]
    served: dict[str, float] = field(default_factory=dict)
    back: dict[tuple[str, str], float] = field(default_factory=dict)
    start: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def begin(self) -> None:
        self.start = time.monotonic()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="recovery")
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set() and len(self.back) < 2 * len(self.partitions):
            for name in self.partitions:
                try:
                    stats = self.cluster.admin.topic_stats(name)
                except (OSError, AdminError):
                    continue
                now = time.monotonic() - self.start
                self.served.setdefault(name, now)
                for publisher in stats.get("publishers", []):
                    kind = "daemon" if publisher["producerName"].startswith("pulsar-bruce") else (
                        "client"
                    )
                    self.back.setdefault((name, kind), now)
            self._stop.wait(0.1)

    def finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def after_move(self, kind: str) -> float | None:
        """The longest a producer of ``kind`` took to be back after its partition was
        served again (None: not seen back on every partition)."""
        waits = []
        for name in self.partitions:
            if (name, kind) not in self.back or name not in self.served:
                return None
            waits.append(self.back[(name, kind)] - self.served[name])
        return max(waits)

    def describe(self) -> str:
        served = max(self.served.values(), default=float("nan"))
        parts = [f"partitions served again {served:.1f} s after the failure"]
        for kind in ("daemon", "client"):
            wait = self.after_move(kind)
            text = "not back" if wait is None else f"back {wait:.1f} s after that"
            parts.append(f"{kind} {text}")
        return "; ".join(parts)


# -- one scenario: the daemon and the control side by side ---------------------------------------


@dataclass
class SideBySide:
    """The daemon and the official client streaming to one topic at the same rate."""

    cluster: ApacheCluster
    daemon: Daemon
    topic: str
    count: int
    keyed: bool = True

    def __post_init__(self) -> None:
        self.ours = SteadySender(self.daemon.sender, self.topic, "d", self.count, RATE, self.keyed)
        self.control = SteadySender(
            lambda: client_sender(self.cluster.url), self.topic, "c", self.count, RATE, self.keyed
        )

    def start(self) -> None:
        self.ours.start()
        self.control.start()

    def at_least(self, n: int) -> Callable[[], bool]:
        return lambda: self.ours.at_least(n)() and self.control.at_least(n)()

    def finish(self, name: str, deduplication: bool) -> tuple[Outcome, Outcome, Counters]:
        """Wait for both, settle the daemon, read back; report both; return the outcomes."""
        ours = self.ours.finish(120)
        control = self.control.finish(120)
        assert self.ours.error is None, f"sending to the daemon failed: {self.ours.error!r}"
        counters = self.daemon.wait_settled(len(ours) + 1, timeout=180)  # + the warm-up
        # What the client says it failed may be missing: not waited for (the read goes on
        # past the count until the topic is quiet, so what is there is read all the same).
        failed = getattr(self.control.opened, "failed", 0)
        expected = len(ours) + len(control) - failed
        read = read_back(self.cluster.url, self.topic, expected, timeout=120)
        self.read = read.only(b"d-")
        ours_outcome = Outcome.of(self.read, ours)
        control_outcome = Outcome.of(read.only(b"c-"), control)
        REPORT.append(
            f"{name} (deduplication {'on' if deduplication else 'off'}): daemon "
            f"{ours_outcome.summary()}, discarded {counters.total_discarded}; official client "
            f"{control_outcome.summary()}"
            + (f", {self.control.error!r}" if self.control.error else "")
        )
        return ours_outcome, control_outcome, counters

    def assert_costs_nothing(self, counters: Counters, context: str) -> None:
        """With deduplication: the daemon discarded nothing, every value stored once."""
        assert not counters.total_discarded, f"discards {counters.discarded}{context}"
        assert_exactly_once(self.read, self.ours.sent, lambda: context)


@pytest.fixture
def cluster_daemon(
    apache_cluster: ApacheCluster, start_daemon: Callable[..., Daemon]
) -> Callable[..., Daemon]:
    return lambda *args: start_daemon(apache_cluster.url, *DAEMON_ARGS, *args)


class Stage(NamedTuple):
    """A fresh namespace and 8-partition topic, and a daemon whose producers are ready."""

    namespace: str
    topic: str
    daemon: Daemon


@pytest.fixture
def stage(
    apache_cluster: ApacheCluster, cluster_daemon: Callable[..., Daemon]
) -> Callable[..., Stage]:
    """``stage(prefix, deduplication, *daemon_args)``."""

    def make(prefix: str, deduplication: bool, *args: str) -> Stage:
        ns = namespace(apache_cluster, deduplication)
        topic = partitioned_topic(apache_cluster, ns, prefix)
        daemon = cluster_daemon(*args)
        daemon.warm_up(topic, PARTITIONS)
        return Stage(ns, topic, daemon)

    return make


@pytest.fixture
def whole_cluster(apache_cluster: ApacheCluster) -> Iterator[ApacheCluster]:
    """The cluster, with ZooKeeper, the bookie and every broker running again after the test."""
    yield apache_cluster
    apache_cluster.bookie.resume()
    apache_cluster.start_storage()
    for broker in apache_cluster.brokers:
        if not broker.running:
            broker.start()


def stored_but_counted_lost(discard_log: Path, read: ReadBack) -> list[bytes]:
    """The values the daemon gave up (its discard log, any reason but a possible duplicate)
    that the read-back found stored all the same: a loss counted that did not happen."""
    given_up: set[bytes] = set()
    if discard_log.exists():
        for line in discard_log.read_text().splitlines():
            entry = json.loads(line)
            if entry["reason"] != "possible_duplicate":
                given_up.add(base64.b64decode(entry["value_b64_prefix"]))
    return sorted(value for value in given_up if value in read)


# -- routing across brokers ------------------------------------------------------------------


def test_partition_keys_land_on_k_mod_n_on_topics_owned_by_every_broker(
    apache_cluster: ApacheCluster, cluster_daemon: Callable[..., Daemon]
) -> None:
    """Lookups that redirect: fresh topics whose partitions the three brokers own, sent to
    before any producer is ready, every message on ``K % 8`` (Bruce fails over from an
    unavailable partition only, never from one still being created)."""
    ns = namespace(apache_cluster, deduplication=False)
    topics = [partitioned_topic(apache_cluster, ns, f"route{i}") for i in range(4)]
    daemon = cluster_daemon()
    per_topic = 200
    with daemon.sender() as sender:
        for key in range(per_topic):
            for topic in topics:
                sender.send(topic, b"%d" % key, partition_key=key)
    counters = daemon.wait_settled(per_topic * len(topics), timeout=120)
    context = f"{counters}{evidence(daemon, apache_cluster)}"
    assert counters.acked == per_topic * len(topics), context
    owners = {
        apache_cluster.owner(partition(topic, index))
        for topic in topics
        for index in range(PARTITIONS)
    }
    assert len(owners) >= 2, f"the topics landed on one broker only: {owners}"
    for topic in topics:
        read = read_back(apache_cluster.url, topic, per_topic)
        assert sorted(read) == sorted(b"%d" % key for key in range(per_topic))
        misplaced = {v: p for v, p in read.partitions.items() if p != int(v) % PARTITIONS}
        assert not misplaced, f"{len(misplaced)} on another partition than K % 8: {misplaced}"
    REPORT.append(f"routing: {len(topics)} fresh topics on {len(owners)} brokers, all on K % 8")


# -- bundles that move -------------------------------------------------------------------------


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "no-dedup"])
def test_namespace_unloads_and_a_bundle_split_while_streaming(
    apache_cluster: ApacheCluster, stage: Callable[..., Stage], deduplication: bool
) -> None:
    ns, topic, daemon = stage("moves", deduplication)
    n = 4000
    scenario = SideBySide(apache_cluster, daemon, topic, n)
    scenario.start()
    wait_for(scenario.at_least(n // 4), 60, "a quarter sent")
    apache_cluster.unload_namespace(ns)
    wait_for(scenario.at_least(n // 2), 60, "half sent")
    bundles = apache_cluster.bundles(ns)
    apache_cluster.split_bundle(ns, bundles[0])
    wait_for(scenario.at_least(3 * n // 4), 60, "three quarters sent")
    apache_cluster.unload_namespace(ns)
    ours, control, counters = scenario.finish("unloads and a split", deduplication)
    context = f"\n{counters}{evidence(daemon, apache_cluster)}"
    if deduplication:
        scenario.assert_costs_nothing(counters, context)
    else:
        assert not ours.lost, f"{ours.summary()}{context}"
        assert not counters.total_discarded, context
        # Without deduplication a resend after a move may be stored twice, the client's as
        # ours: no more often than the client's in the same moments, give or take the noise
        # of which writes a move catches (a tenth of a second's messages).
        assert len(ours.twice) <= len(control.twice) + RATE // 10, context


# -- brokers that die or restart -----------------------------------------------------------------


def test_a_broker_sigkilled_mid_stream_costs_nothing(
    whole_cluster: ApacheCluster, stage: Callable[..., Stage]
) -> None:
    """The broker owning some partitions vanishes; the cluster hands its bundles to the
    others once its metadata session expires; the daemon's producers follow."""
    cluster = whole_cluster
    _, topic, daemon = stage("kill", True)
    victim = cluster.broker_at(cluster.owner(partition(topic, 0)))
    moved = [
        partition(topic, i)
        for i in range(PARTITIONS)
        if cluster.owner(partition(topic, i)) == victim.url
    ]
    n = 8000  # 20 s: both still sending when the cluster serves the moved partitions again
    scenario = SideBySide(cluster, daemon, topic, n)
    recovery = Recovery(cluster, moved)
    scenario.start()
    wait_for(scenario.at_least(n // 4), 60, "a quarter sent")
    victim.kill()
    recovery.begin()
    _, _, counters = scenario.finish("broker SIGKILL", True)
    recovery.finish()
    REPORT.append(f"broker SIGKILL, {len(moved)} partitions moved: {recovery.describe()}")
    scenario.assert_costs_nothing(
        counters, f"\n{counters}\n{recovery.describe()}{evidence(daemon, cluster)}"
    )


def test_a_rolling_restart_costs_nothing(
    whole_cluster: ApacheCluster, stage: Callable[..., Stage]
) -> None:
    """A broker stopped (SIGTERM: it hands its bundles over) and started again, then the
    next one, while both producers stream."""
    cluster = whole_cluster
    _, topic, daemon = stage("rolling", True)
    n = 8000
    scenario = SideBySide(cluster, daemon, topic, n)
    scenario.start()
    for step, broker in enumerate(cluster.brokers[:2], start=1):
        wait_for(scenario.at_least(n * step // 4), 120, f"{step}/4 sent")
        broker.stop()
        broker.start()
    _, _, counters = scenario.finish("rolling restart", True)
    scenario.assert_costs_nothing(counters, f"\n{counters}{evidence(daemon, cluster)}")


# -- the storage under the brokers: a bookie that stalls, ZooKeeper and the bookie killed --------

#: Longer than the daemon's receipt timeout (``--receipt-timeout-s``, 30 s by default), so its
#: producers are re-created while the writes they wait for are still pending in BookKeeper.
STALL_S = 45.0


def storage_scenario(
    cluster: ApacheCluster, stage: Callable[..., Stage], tmp_path: Path, name: str,
    fault: Callable[[], None], count: int,
) -> None:  # fmt: skip
    """Stream side by side with deduplication, run ``fault`` after a sixth is sent, then
    settle and read back: 0 lost, 0 stored twice, 0 discards, and nothing the daemon counted
    as given up that the topic holds after all."""
    discard_log = tmp_path / "discards.jsonl"
    _, topic, daemon = stage(name.split()[0], True, "--discard-log", str(discard_log))
    scenario = SideBySide(cluster, daemon, topic, count)
    scenario.start()
    wait_for(scenario.at_least(count // 6), 60, "a sixth sent")
    started = time.monotonic()
    fault()
    over = time.monotonic()
    sent = scenario.ours.finish(120)
    daemon.wait_settled(len(sent) + 1, timeout=180)  # + the warm-up
    settled = time.monotonic()
    _, _, counters = scenario.finish(name, True)
    phantom = stored_but_counted_lost(discard_log, scenario.read)
    log = daemon.log()
    REPORT.append(
        f"{name}: the fault lasted {over - started:.0f} s, the daemon had every message "
        f"settled {settled - over:.0f} s after it; producers ready again "
        f"{log.count(' ready on ') - PARTITIONS} times; possible duplicates "
        f"{counters.possible_duplicates}; counted lost but stored {len(phantom)}"
    )
    context = (
        f"\n{counters}\n{len(phantom)} counted lost but stored: {phantom[:10]}"
        f"{evidence(daemon, cluster)}\n--- bookie log tail:\n{cluster.bookie.log()[-3000:]}"
    )
    assert not phantom, context
    scenario.assert_costs_nothing(counters, context)


def test_a_bookie_stalled_longer_than_the_receipt_timeout_costs_nothing(
    whole_cluster: ApacheCluster, stage: Callable[..., Stage], tmp_path: Path
) -> None:
    """The bookie stops answering (SIGSTOP: a stalled disk, a long GC pause) for longer than the
    receipt timeout, then goes on: the brokers' writes stay pending meanwhile, and the daemon's
    re-created producers meet them (in these runs the brokers fenced the topics and closed the
    producers again and again; a resend may also be answered ``PersistenceError`` while the
    earlier write is pending, ``MessageDupUnknownException``).  Everything is stored once in
    the end, and nothing is counted lost."""
    cluster = whole_cluster

    def stall() -> None:
        cluster.bookie.pause()
        time.sleep(STALL_S)  # the injected fault: the stall's length, not a synchronisation
        cluster.bookie.resume()

    # 20 s of streaming at 400 a second each: 3 s before the stall, the rest into it
    storage_scenario(cluster, stage, tmp_path, "bookie stalled 45 s", stall, 20 * RATE)


def test_zookeeper_and_the_bookie_killed_and_restarted_cost_nothing(
    whole_cluster: ApacheCluster, stage: Callable[..., Stage], tmp_path: Path
) -> None:
    """The metadata store and the only bookie SIGKILLed mid-stream and started again on their
    data: no write can be stored, no ledger created, no ownership checked until both are back."""
    cluster = whole_cluster

    def outage() -> None:
        cluster.kill_storage()
        time.sleep(5.0)  # the injected fault: both down for 5 s, not a synchronisation
        cluster.start_storage()

    storage_scenario(cluster, stage, tmp_path, "ZooKeeper and bookie killed", outage, 20 * RATE)
