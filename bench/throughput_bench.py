"""The measurements of ``bench/throughput.py`` (``Bench``): the official client's side, the
to_pulsar -> daemon side, the kernel ceiling, latency at a fixed offered rate and the RSS
while holding messages with the broker killed; and py-spy around a profiled run."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.brokers import BenchBroker
from bench.harness import BenchBase, BenchError, Counters, Daemon, wait_for
from bench.machine import cpu_seconds, memory_kib
from bench.throughput_rows import RowResult, RowSpec, SideRun

#: The daemon's buffer for every run (the 1M-message hold needs more than the default).
DAEMON_ARGS = ["--buffer-max-bytes", "512MiB"]


class Bench(BenchBase):
    """The measurements; every worker it starts is killed on the way out."""

    def __init__(self, args: argparse.Namespace, workdir: Path):
        super().__init__(args, workdir)
        self.profile_outputs: list[Path] = []
        self.warmups: list[dict[str, Any]] = []

    def warm_broker(self, broker: BenchBroker) -> None:
        """Before any measured run on a fresh broker: ``--warmup`` 100 B messages through the
        official client (for the JVM's JIT; done on either kind, alike), then its idle CPU."""
        n = self.args.warmup
        warm: dict[str, Any] = {"broker": broker.label, "messages": n, "rate": 0.0}
        if n:
            topic = f"bench-{self.run_id}-warmup-{len(self.warmups)}"
            params = {"service_url": broker.url, "topic": topic, "messages": n, "size": 100}
            params.update(keyed=False, max_pending=self.args.max_pending, callback=False)
            worker = self.worker("official", params, f"warmup-{broker.kind}")
            worker.go()
            result = worker.result(timeout=120 + n / 1000)
            if result["t_last"] is None or result["errors"]:
                raise BenchError(f"warm-up of {broker.label} failed: {result}")
            warm["rate"] = n / (result["t_last"] - result["t0"])
        idle_s = 1.0 if self.args.quick else 3.0
        cpu0 = cpu_seconds(broker.pid)
        time.sleep(idle_s)
        warm["idle_cores"] = (cpu_seconds(broker.pid) - cpu0) / idle_s
        print(
            f"  warm-up: {n:,} x 100 B, official client, {warm['rate']:,.0f} msg/s (not "
            f"measured); then idle for {idle_s:g} s: broker CPU {warm['idle_cores']:.1%} of a core",
            flush=True,
        )
        self.warmups.append(warm)

    # -- side (a): the official client ------------------------------------------------------

    def run_official(
        self, broker: BenchBroker, row: RowSpec, topic: str, callback: bool = False
    ) -> SideRun:
        worker = self.worker(
            "official",
            {
                "service_url": broker.url,
                "topic": topic,
                "messages": row.messages,
                "size": row.size,
                "keyed": row.keyed,
                "max_pending": self.args.max_pending,
                "callback": callback,
                "payload": row.payload,
                "compression": self.args.official_compression,
            },
            "official-callback" if callback else "official",
        )
        broker_cpu0 = cpu_seconds(broker.pid)
        worker.go()
        result = worker.result(timeout=120 + row.messages / 1000)
        broker_cpu = cpu_seconds(broker.pid) - broker_cpu0
        n = row.messages
        ok = result["t_last"] is not None and result["receipts"] == n and result["errors"] == 0
        if not ok:
            self.fail(
                f"official client{' (callback)' if callback else ''}, {row.name}: "
                f"{result['receipts']} receipts for {n} sends, "
                f"{result['errors']} not OK"
            )
        seconds = (result["t_last"] or time.monotonic()) - result["t0"]
        return SideRun.of(n, seconds, ok, result["cpu_s"], broker_cpu)

    def run_ceiling(self, row: RowSpec) -> SideRun:
        """Python send() into Python recv_into(), no daemon: what the socket allows."""
        worker = self.worker("ceiling", {"messages": row.messages, "size": row.size}, "ceiling")
        worker.go()
        result = worker.result(timeout=120 + row.messages / 1000)
        seconds = result["t_last"] - result["t0"]
        if not result["ok"]:
            self.fail(f"kernel ceiling, {row.name}: the receiving process failed")
        return SideRun.of(
            row.messages, seconds, result["ok"], result["cpu_s"], 0.0, result["receiver_cpu_s"]
        )

    # -- side (b): to_pulsar -> daemon --------------------------------------------------------

    def run_daemon_side(
        self,
        daemon: Daemon,
        broker: BenchBroker,
        row: RowSpec,
        topic: str,
        profile: Path | None = None,
    ) -> SideRun:
        n = row.messages
        worker = self.worker(
            "sender",
            {
                "socket": daemon.socket_path,
                "topic": topic,
                "messages": n,
                "size": row.size,
                "keyed": row.keyed,
                "payload": row.payload,
                "stream": row.stream,
                "stream_socket": daemon.socket_path.removesuffix(".sock") + ".stream.sock",
            },
            "stream-sender" if row.stream else "sender",
        )
        base = daemon.scrape()
        target = base.settled + n
        scrapes0 = daemon.scrapes
        spy = start_profile(daemon, profile) if profile else None
        daemon_cpu0, broker_cpu0 = cpu_seconds(daemon.pid), cpu_seconds(broker.pid)
        worker.go()
        t_done, broken = daemon.poll_settled(target, 120 + n / 1000, f"daemon side, {row.name}")
        if broken:
            self.fail(f"daemon side, {row.name}: the accounting identity broke in {broken} scrapes")
        daemon_cpu = cpu_seconds(daemon.pid) - daemon_cpu0
        broker_cpu = cpu_seconds(broker.pid) - broker_cpu0
        scrapes = daemon.scrapes - scrapes0
        if spy is not None:
            stop_profile(spy)
        result = worker.result(timeout=60)
        end = daemon.wait_settled(base.received + n, 60)
        ok = self.check_daemon_run(f"daemon side, {row.name}", base, end, n)
        if not result.get("flushed_ok", True):
            self.fail(f"daemon side, {row.name}: the stream flush reported discards")
            ok = False
        seconds = t_done - result["t0"]
        return SideRun.of(n, seconds, ok, result["cpu_s"], broker_cpu, daemon_cpu, scrapes)

    # -- the throughput table -------------------------------------------------------------------

    def throughput_rows(
        self, broker: BenchBroker, daemon: Daemon, rows: list[RowSpec]
    ) -> list[RowResult]:
        results = []
        for row in rows:
            result = RowResult(row)
            topic_a = f"bench-{self.run_id}-{row.name}-official".replace(" ", "")
            topic_b = f"bench-{self.run_id}-{row.name}-daemon".replace(" ", "")
            for topic in (topic_a, topic_a + "-callback", topic_b):
                broker.make_partitioned(topic, row.partitions)
            self.warm_topic(daemon, topic_b, row.keyed, row.partitions)
            for round_no in range(1, self.args.rounds + 1):
                a = self.run_official(broker, row, topic_a)
                result.official.append(a)
                extra = ""
                if row.extras:
                    cb = self.run_official(broker, row, topic_a + "-callback", callback=True)
                    result.official_callback.append(cb)
                    ceiling = self.run_ceiling(row)
                    result.ceiling.append(ceiling)
                    extra = f"  (a') {cb.rate:>9,.0f}  ceiling {ceiling.rate:>9,.0f}"
                b = self.run_daemon_side(daemon, broker, row, topic_b)
                result.daemon.append(b)
                print(
                    f"  {row.name:<22} round {round_no}: (a) {a.rate:>9,.0f} msg/s"
                    f"  (b) {b.rate:>9,.0f} msg/s  b/a {b.rate / a.rate:5.2f}{extra}"
                    f"  daemon {b.daemon_cpu_us:5.2f} µs/msg  sender {b.client_cpu_us:5.2f} µs/msg",
                    flush=True,
                )
            results.append(result)
            if self.args.profile is not None and row.size == 100 and not row.keyed:
                self.profiled_run(broker, daemon, row, topic_b)
        return results

    def profiled_run(self, broker: BenchBroker, daemon: Daemon, row: RowSpec, topic: str) -> None:
        """One extra (b) run under py-spy, kept out of the table (sampling slows the daemon)."""
        self.args.profile.mkdir(parents=True, exist_ok=True)
        output = self.args.profile / f"daemon-{row.name.replace(' ', '')}.txt"
        run = self.run_daemon_side(daemon, broker, row, topic, profile=output)
        print(
            f"  {row.name:<22} profiled (not in the table): (b) {run.rate:>9,.0f} msg/s"
            f"  daemon {run.daemon_cpu_us:5.2f} µs/msg; py-spy stacks in {output}",
            flush=True,
        )
        self.profile_outputs.append(output)

    # -- latency at a fixed offered rate ------------------------------------------------------

    def latency(self, broker: BenchBroker, daemon: Daemon | None, rate: float) -> dict[str, Any]:
        """send -> consumer receive at ``rate``; via the daemon, or the official client if None."""
        n = max(1, int(rate * self.args.latency_seconds))
        side = "daemon" if daemon is not None else "official"
        topic = f"bench-{self.run_id}-latency-{side}"
        broker.make_partitioned(topic, 1)
        if daemon is not None:
            self.warm_topic(daemon, topic, False, 1)
        consumer = self.worker(
            "consumer",
            {
                "service_url": broker.url,
                "topic": topic,
                "messages": n,
                "timeout": 60 + self.args.latency_seconds,
            },
            f"consumer-{side}",
        )
        params: dict[str, Any] = {"topic": topic, "messages": n, "size": 100, "keyed": False}
        params["rate"] = rate
        if daemon is not None:
            params["socket"] = daemon.socket_path
            producer = self.worker("sender", params, "sender-latency")
            base = daemon.scrape()
        else:
            params.update(service_url=broker.url, max_pending=self.args.max_pending)
            producer = self.worker("official", params, "official-latency")
        consumer.go()
        producer.go()
        sent = producer.result(timeout=120 + self.args.latency_seconds)
        got = consumer.result(timeout=120 + self.args.latency_seconds)
        offered = n / (sent["t_sent"] - sent["t0"]) if sent["t_sent"] > sent["t0"] else 0.0
        out: dict[str, Any] = {
            "side": side,
            "messages": n,
            "offered_rate": offered,
            "received": got["received"],
            "duplicates": got["duplicates"],
            **got["latencies"],
        }
        if daemon is not None:
            end = daemon.wait_settled(base.received + n, 60)
            self.check_daemon_run("latency run (daemon)", base, end, n)
            out["daemon_receipt_ms"] = histogram_quantiles(base, end)
        elif sent["errors"] or sent["receipts"] != n:
            self.fail(f"latency run (official): {sent['receipts']} receipts, {sent['errors']} bad")
        if got["received"] != n:
            # Not a loss by the bench's rule (acks and receipts are); shown with the figures.
            print(f"  note: latency run ({side}): the consumer read {got['received']:,} of {n:,}")
        return out

    # -- memory ------------------------------------------------------------------------------------

    def rss_hold(self, broker: BenchBroker, messages: int) -> dict[str, Any]:
        """RSS while holding ``messages`` unacknowledged 100-byte messages (broker killed).

        No send timeout: the broker is down on purpose, and a JVM broker's restart after a
        SIGKILL (bookie recovery, topic policies) can take longer than the default 30 s."""
        hold_args = [*DAEMON_ARGS, "--send-timeout-s", "0"]
        daemon = Daemon(self.workdir / f"{broker.kind}-daemon-rss", broker.url, hold_args)
        try:
            time.sleep(0.5)
            idle_kib = memory_kib(daemon.pid)["VmRSS"]
            topic = f"bench-{self.run_id}-rss"
            broker.make_partitioned(topic, 1)
            self.warm_topic(daemon, topic, False, 1)
            base = daemon.scrape()
            broker.kill()
            before_kib = memory_kib(daemon.pid)["VmRSS"]
            sender = self.worker(
                "sender",
                {
                    "socket": daemon.socket_path,
                    "topic": topic,
                    "messages": messages,
                    "size": 100,
                    "keyed": False,
                },
                "sender-rss",
            )
            sender.go()
            sender.result(timeout=300)

            def all_received() -> Counters | None:
                daemon.check_alive()
                c = daemon.scrape()
                return c if c.received - base.received >= messages else None

            held = wait_for(all_received, 120, f"{messages} datagrams to be received")
            memory = memory_kib(daemon.pid)
            discarded = held.total_discarded - base.total_discarded
            if discarded:
                self.fail(f"RSS hold: {discarded} messages discarded while holding: {held}")
            payload = messages * 100
            out: dict[str, Any] = {
                "messages": messages,
                "idle_rss_mb": idle_kib * 1024 / 1e6,
                "before_rss_mb": before_kib * 1024 / 1e6,
                "held_rss_mb": memory["VmRSS"] * 1024 / 1e6,
                "peak_rss_mb": memory["VmHWM"] * 1024 / 1e6,
                "buffered_messages": held.buffered,
                "payload_mb": payload / 1e6,
                "ratio": memory["VmRSS"] * 1024 / payload,
                "growth_ratio": (memory["VmRSS"] - before_kib) * 1024 / payload,
            }
            # Bring the broker back: every held message must still be delivered.
            restarted = time.monotonic()
            broker.start()
            end = daemon.wait_settled(base.received + messages, 300)
            out["redelivery_s"] = time.monotonic() - restarted
            out["ok"] = self.check_daemon_run("RSS hold, after broker restart", base, end, messages)
            return out
        finally:
            daemon.stop()


def start_profile(daemon: Daemon, output: Path) -> subprocess.Popen[bytes]:
    """py-spy with native frames (it pauses the daemon for each sample)."""
    spy = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(daemon.pid),
            "--rate",
            "200",
            "--format",
            "raw",
            "--native",
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # let it attach before the run starts
    return spy


def stop_profile(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)
    spy.wait(30)


def histogram_quantiles(base: Counters, end: Counters) -> dict[str, float]:
    """p50/p99 upper bucket bounds (ms) of the daemon's batch-written -> receipt histogram."""
    deltas = sorted(
        (bound, end.latency_buckets.get(bound, 0) - base.latency_buckets.get(bound, 0))
        for bound in end.latency_buckets
    )
    if not deltas or deltas[-1][1] <= 0:
        return {}
    total = deltas[-1][1]
    out = {}
    for name, q in (("p50_le_ms", 0.5), ("p99_le_ms", 0.99)):
        out[name] = next(bound * 1000 for bound, count in deltas if count >= q * total)
    return out
