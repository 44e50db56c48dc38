#!/usr/bin/env python3
"""Crash benchmark: ``kill -9`` the daemon under load, restart it, count what was lost.

A sender writes numbered 100-byte datagrams (``crash-<n>``) at ``--rate`` (0: as fast
as it can) into the daemon's socket, with blocking ``sendto`` as ``to_pulsar`` does.
While it sends, the daemon is killed ``--kills`` times, ``--interval`` seconds apart,
and restarted at once on the same paths, as ``Restart=always`` would; a datagram the
sender could not hand over (no daemon listening) is retried, so only what the kernel
took counts as sent.  Then the topic is read back with the official client:

lost          sent but never stored
stored twice  stored more than once

Setups (``--setups``, comma-separated):

none     no state directory (what memory holds dies with the process)
journal  ``--spool-dir`` (the write-ahead journal, ``--spool-fsync interval``)
held     ``--spool-dir`` and the socket held by this process, passed to each daemon
         as systemd's socket activation does (fd 3, LISTEN_FDS), so datagrams queue
         in the kernel while no daemon runs
nojournal-held  the socket held, ``--spool-dir --no-spool-journal`` (the spool alone)

On Apache Pulsar (``--broker apache``, the default) the namespace has deduplication
on, so a batch resent after a restart under its journalled producer name and
sequence ids is dropped by the broker if it had been stored.

    python -m bench.crash --broker apache --rate 20000 --kills 3 --interval 1
    python -m bench.crash --rate 0 --kills 3 --interval 0.4 --setups held
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.brokers import CHOICES, BenchBroker, Brokers, kinds
from tests.support.processes import (
    free_port,
    launch_activated,
    port_open,
    source_env,
    wait_for,
)

SIZE = 100
PARTITIONS = 4
SETUPS = ("none", "journal", "held", "nojournal-held")


class Supervisor:
    """Runs the daemon, kills and restarts it on the same paths (socket, spool)."""

    def __init__(self, workdir: Path, service_url: str, setup: str):
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.socket_path = str(workdir / "bruce.sock")
        self.metrics_port = free_port()
        self.args = [
            "--socket", self.socket_path, "--service-url", service_url,
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--stream-socket", "off",
            "--send-timeout-s", "0", "--buffer-max-bytes", "512MiB",
        ]  # fmt: skip
        if setup != "none":
            self.args += ["--spool-dir", str(workdir / "state")]
        if setup.startswith("nojournal"):
            self.args.append("--no-spool-journal")
        self.held: socket.socket | None = None
        if setup.endswith("held"):
            self.held = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.held.bind(self.socket_path)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "daemon.log"

    def start(self) -> None:
        env = source_env()
        with self.log.open("ab") as log:
            if self.held is not None:
                self.process = launch_activated(self.held, self.workdir, self.args, env)
            else:
                argv = [sys.executable, "-m", "pulsar_bruce", *self.args]
                self.process = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        wait_for(lambda: port_open(self.metrics_port), 30, "daemon to serve")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(120)
        if self.held is not None:
            self.held.close()

    def buffered(self) -> float:
        from tests.support.processes import parse_samples, scrape_metrics

        samples = parse_samples(
            scrape_metrics(self.metrics_port, ["pulsar_bruce_buffered_messages"])
        )
        return samples.get("pulsar_bruce_buffered_messages", -1.0)


class NumberedSender(threading.Thread):
    """Sends ``crash-<n>`` datagrams at a rate (0: flat out); only what the kernel took counts."""

    def __init__(self, path: str, topic: str, rate: float, seconds: float):
        super().__init__(daemon=True)
        self.path, self.topic, self.rate, self.seconds = path, topic, rate, seconds
        self.sent = 0
        self.retries = 0

    def run(self) -> None:
        from to_pulsar import encoding

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        start = time.perf_counter()
        end = start + self.seconds
        n = 0
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            if self.rate and n > (now - start) * self.rate:
                time.sleep(0.0005)
                continue
            value = f"crash-{n}".encode().ljust(SIZE, b".")
            datagram = encoding.encode_any_partition(self.topic, value)
            try:
                sock.sendto(datagram, self.path)
            except (FileNotFoundError, ConnectionRefusedError):
                self.retries += 1  # no daemon listening: not sent; try again
                time.sleep(0.001)
                continue
            n += 1
        self.sent = n
        sock.close()


@dataclass
class CrashResult:
    setup: str
    rate: float
    kills: int
    sent: int
    stored: int
    lost: int
    twice: int
    retries: int


def read_back(service_url: str, topic: str, expect: int, idle_s: float = 5.0) -> Counter[int]:
    """How often each ``crash-<n>`` was stored: read until ``idle_s`` passes without a
    message once ``expect`` arrived (four times as long while fewer did)."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    counts: Counter[int] = Counter()
    total = 0
    try:
        consumer = client.subscribe(
            topic, f"crash-{time.monotonic_ns()}", initial_position=pulsar.InitialPosition.Earliest
        )
        last = time.monotonic()
        while time.monotonic() - last < (idle_s if total >= expect else 4 * idle_s):
            try:
                message = consumer.receive(500)
            except pulsar.Timeout:
                continue
            counts[int(message.data().split(b".", 1)[0].removeprefix(b"crash-"))] += 1
            total += 1
            consumer.acknowledge(message)
            last = time.monotonic()
    finally:
        client.close()
    return counts


def run_setup(
    broker: BenchBroker,
    workdir: Path,
    setup: str,
    rate: float,
    kills: int,
    interval: float,
    namespace: str = "public/default",
) -> CrashResult:
    """One sender, ``kills`` kills and restarts, the topic read back."""
    topic = f"persistent://{namespace}/crash-{setup}-{time.monotonic_ns()}"
    broker.make_partitioned(topic, PARTITIONS)
    supervisor = Supervisor(workdir / f"{setup}-{int(rate)}", broker.url, setup)
    supervisor.start()
    sender = NumberedSender(supervisor.socket_path, topic, rate, interval * (kills + 1))
    try:
        sender.start()
        for _ in range(kills):
            time.sleep(interval)
            supervisor.kill()
            supervisor.start()
        sender.join()
        wait_for(lambda: supervisor.buffered() == 0, 180, "the daemon to settle")
    finally:
        supervisor.stop()
    counts = read_back(broker.url, topic, sender.sent)
    lost = sum(1 for n in range(sender.sent) if counts[n] == 0)
    twice = sum(count - 1 for count in counts.values() if count > 1)
    return CrashResult(
        setup, rate, kills, sender.sent, sum(counts.values()), lost, twice, sender.retries
    )


def report(results: list[CrashResult], broker_label: str) -> None:
    dedup = ", deduplication on" if "Apache" in broker_label else " (no deduplication)"
    print(f"\ncrash benchmark on {broker_label}, {PARTITIONS} partitions{dedup}:")
    print("| setup | rate | kills | sent | lost | stored twice |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        rate = f"{r.rate:,.0f}/s" if r.rate else "max"
        print(f"| {r.setup} | {rate} | {r.kills} | {r.sent:,} | {r.lost:,} | {r.twice:,} |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(args.workdir or f"/tmp/pulsar-bruce-crash-{os.getpid()}")
    results: list[CrashResult] = []
    for kind in kinds(args.broker):
        brokers = Brokers(kind, workdir / kind)
        try:
            broker = brokers.get(PARTITIONS)
            enable_deduplication(broker)
            for setup in args.setups.split(","):
                for rate in args.rate:
                    result = run_setup(broker, workdir, setup, rate, args.kills, args.interval)
                    results.append(result)
                    print(f"  {setup} at {rate or 'max'}: {result}")
            report(results, broker.label)
        finally:
            brokers.stop()
    return 0


def enable_deduplication(broker: BenchBroker) -> None:
    process: Any = broker.process
    admin = getattr(process, "admin", None)
    if admin is not None:
        admin.set_deduplication("public/default", True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=CHOICES, default="apache")
    parser.add_argument(
        "--rate", type=float, nargs="+", default=[20_000.0], help="datagrams/s (0: max)"
    )
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between kills")
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--workdir", default="")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
