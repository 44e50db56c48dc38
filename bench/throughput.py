#!/usr/bin/env python3
"""Throughput, CPU, latency and memory of pulsar-bruce against the official Pulsar client.

One command, one broker at a time (pulsar-lite on a free port in a temp dir), one
daemon; the two sides of every comparison run alternately, round after round:

(a) one process publishes N messages with the official client (batching on,
    ``send_async`` for all, ``flush()``); time from the first send to the Nth receipt.
(b) one process sends the same N as Bruce datagrams with ``to_pulsar.Sender``; time
    from the first send until the daemon's ``pulsar_bruce_acked_total`` has grown by
    N (its /metrics polled every 5 ms; nothing subtracted).

Each side is its own process: the sender's CPU is ``time.process_time()`` inside it,
the daemon's (and broker's) from ``/proc/<pid>/stat``. Then: send -> consumer receive
latency at a fixed offered rate, and the daemon's RSS idle and while holding 1,000,000
unacknowledged messages with the broker killed. Exits 1 if any run loses a message
(2 if the bench itself fails); the issue's targets are printed, never enforced.

    python -m bench.throughput                 # the full run (a few minutes)
    python -m bench.throughput --quick         # a smoke run
    python -m bench.throughput --set-qlen 512  # as root: raise net.unix.max_dgram_qlen
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import (
    BenchBase,
    Broker,
    Counters,
    Daemon,
    MachineCpu,
    cpu_seconds,
    memory_kib,
    wait_for,
)
from bench.profile_summary import summarize

#: The daemon's buffer for every run (the 1M-message hold needs more than the default).
DAEMON_ARGS = ["--buffer-max-bytes", "512MiB"]


@dataclass(frozen=True)
class RowSpec:
    """One line of the throughput table: a message size and routing on a broker."""

    name: str
    size: int
    messages: int
    partitions: int
    keyed: bool
    stream: bool = False  # StreamSender on the stream socket, one flush at the end
    extras: bool = False  # also the official client with a callback, and the kernel ceiling


@dataclass
class SideRun:
    """One timed run of one side."""

    rate: float
    seconds: float
    ok: bool
    client_cpu_us: float  # (a): official client process; (b): sender process
    broker_cpu_us: float
    #: (b): the daemon; kernel ceiling: the receiving process (the daemon's floor).
    daemon_cpu_us: float | None = None
    scrapes: int | None = None


@dataclass
class RowResult:
    spec: RowSpec
    official: list[SideRun] = field(default_factory=list)  # no callback: the headline
    daemon: list[SideRun] = field(default_factory=list)
    official_callback: list[SideRun] = field(default_factory=list)
    ceiling: list[SideRun] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [b.rate / a.rate for a, b in zip(self.official, self.daemon, strict=True)]


class Bench(BenchBase):
    """The measurements; every worker it starts is killed on the way out."""

    def __init__(self, args: argparse.Namespace, workdir: Path):
        super().__init__(args, workdir)
        self.profile_outputs: list[Path] = []

    # -- side (a): the official client ------------------------------------------------------

    def run_official(
        self, broker: Broker, row: RowSpec, topic: str, callback: bool = False
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
        return SideRun(
            rate=n / seconds,
            seconds=seconds,
            ok=ok,
            client_cpu_us=result["cpu_s"] / n * 1e6,
            broker_cpu_us=broker_cpu / n * 1e6,
        )

    def run_ceiling(self, row: RowSpec) -> SideRun:
        """Python send() into Python recv_into(), no daemon: what the socket allows."""
        worker = self.worker("ceiling", {"messages": row.messages, "size": row.size}, "ceiling")
        worker.go()
        result = worker.result(timeout=120 + row.messages / 1000)
        seconds = result["t_last"] - result["t0"]
        if not result["ok"]:
            self.fail(f"kernel ceiling, {row.name}: the receiving process failed")
        return SideRun(
            rate=row.messages / seconds,
            seconds=seconds,
            ok=result["ok"],
            client_cpu_us=result["cpu_s"] / row.messages * 1e6,
            broker_cpu_us=0.0,
            daemon_cpu_us=result["receiver_cpu_s"] / row.messages * 1e6,
        )

    # -- side (b): to_pulsar -> daemon --------------------------------------------------------

    def run_daemon_side(
        self, daemon: Daemon, broker: Broker, row: RowSpec, topic: str, profile: Path | None = None
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
        return SideRun(
            rate=n / seconds,
            seconds=seconds,
            ok=ok,
            client_cpu_us=result["cpu_s"] / n * 1e6,
            broker_cpu_us=broker_cpu / n * 1e6,
            daemon_cpu_us=daemon_cpu / n * 1e6,
            scrapes=scrapes,
        )

    # -- the throughput table -------------------------------------------------------------------

    def throughput_rows(
        self, broker: Broker, daemon: Daemon, rows: list[RowSpec]
    ) -> list[RowResult]:
        results = []
        for row in rows:
            result = RowResult(row)
            topic_a = f"bench-{self.run_id}-{row.name}-official".replace(" ", "")
            topic_b = f"bench-{self.run_id}-{row.name}-daemon".replace(" ", "")
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

    def profiled_run(self, broker: Broker, daemon: Daemon, row: RowSpec, topic: str) -> None:
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

    def latency(self, broker: Broker, daemon: Daemon | None, rate: float) -> dict[str, Any]:
        """send -> consumer receive at ``rate``; via the daemon, or the official client if None."""
        n = max(1, int(rate * self.args.latency_seconds))
        side = "daemon" if daemon is not None else "official"
        topic = f"bench-{self.run_id}-latency-{side}"
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

    def rss_hold(self, broker: Broker, messages: int) -> dict[str, Any]:
        """RSS while holding ``messages`` unacknowledged 100-byte messages (broker killed)."""
        daemon = Daemon(self.workdir / "daemon-rss", broker.url, DAEMON_ARGS)
        try:
            time.sleep(0.5)
            idle_kib = memory_kib(daemon.pid)["VmRSS"]
            topic = f"bench-{self.run_id}-rss"
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


# -- orchestration ------------------------------------------------------------------------------


def row_specs(n: int) -> list[RowSpec]:
    return [
        RowSpec("100 B", 100, n, 1, False, extras=True),
        RowSpec("1 KB", 1000, max(100, n // 3), 1, False),
        RowSpec("10 KB", 10_000, max(100, n // 10), 1, False),
        RowSpec("100 B 4-part key", 100, n, 4, True),
        RowSpec("100 B stream", 100, n, 1, False, stream=True),
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    cpu_before = MachineCpu.now()
    with contextlib.ExitStack() as stack:
        workdir, machine = harness.open_run(stack, args)
        print_machine(machine, args)
        bench = Bench(args, workdir)
        stack.callback(bench.kill_workers)
        results, rows = run_all(bench, stack)
    results["machine"] = machine
    results["wall_s"] = time.monotonic() - started
    results.update(MachineCpu.now().since(cpu_before))
    results["lost"] = bench.failures
    results["profiles"] = [str(path) for path in bench.profile_outputs]
    print_report(results, rows, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 1 if bench.failures else 0


def run_all(bench: Bench, stack: contextlib.ExitStack) -> tuple[dict[str, Any], list[RowResult]]:
    args = bench.args
    specs = row_specs(args.messages)
    results: dict[str, Any] = {"config": config_summary(args), "rows": []}

    # Phase 1: a broker with 4-partition topics, for the PartitionKey row.
    print("phase 1: broker with default_partitions = 4", flush=True)
    broker4 = Broker(bench.workdir / "broker4", partitions=4)
    broker4.start()
    stack.callback(broker4.stop)
    daemon4 = Daemon(bench.workdir / "daemon4", broker4.url, DAEMON_ARGS)
    stack.callback(daemon4.stop)
    rows4 = bench.throughput_rows(broker4, daemon4, [s for s in specs if s.partitions == 4])
    daemon4.stop()
    broker4.stop()

    # Phase 2: a broker with 1-partition topics for everything else.
    print("phase 2: broker with default_partitions = 1", flush=True)
    broker = Broker(bench.workdir / "broker1", partitions=1)
    broker.start()
    stack.callback(broker.stop)
    daemon = Daemon(bench.workdir / "daemon1", broker.url, DAEMON_ARGS)
    stack.callback(daemon.stop)
    time.sleep(0.5)
    results["idle_rss_mb"] = memory_kib(daemon.pid)["VmRSS"] * 1024 / 1e6
    results["daemon_argv"] = " ".join(daemon.argv[1:])
    results["scrape_cpu_us"] = scrape_cost(daemon)
    rows1 = bench.throughput_rows(broker, daemon, [s for s in specs if s.partitions == 1])
    rows = rows1 + rows4
    results["rows"] = [row_json(r) for r in rows]

    print(f"latency: {args.latency_rate:,.0f} msg/s for {args.latency_seconds} s", flush=True)
    results["latency"] = [
        bench.latency(broker, daemon, args.latency_rate),
        bench.latency(broker, None, args.latency_rate),
    ]
    daemon.stop()

    if args.rss_messages:
        print(f"memory: holding {args.rss_messages:,} messages with the broker killed", flush=True)
        results["rss_hold"] = bench.rss_hold(broker, args.rss_messages)
    return results, rows


def scrape_cost(daemon: Daemon, scrapes: int = 200) -> float:
    """Daemon CPU per polling scrape (the counters only) while idle (µs): context for the
    5 ms polling."""
    cpu0 = cpu_seconds(daemon.pid)
    for _ in range(scrapes):
        daemon.scrape(cheap=True)
    return (cpu_seconds(daemon.pid) - cpu0) / scrapes * 1e6


def row_json(row: RowResult) -> dict[str, Any]:
    return {
        "spec": asdict(row.spec),
        "official": [asdict(run) for run in row.official],
        "daemon": [asdict(run) for run in row.daemon],
        "official_callback": [asdict(run) for run in row.official_callback],
        "kernel_ceiling": [asdict(run) for run in row.ceiling],
        "median_ratio": statistics.median(row.ratios()),
    }


def config_summary(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "messages": args.messages,
        "rounds": args.rounds,
        "max_pending": args.max_pending,
        "latency_rate": args.latency_rate,
        "latency_seconds": args.latency_seconds,
        "rss_messages": args.rss_messages,
    }


# -- output ----------------------------------------------------------------------------------------


def print_machine(machine: dict[str, Any], args: argparse.Namespace) -> None:
    harness.print_machine("pulsar-bruce throughput bench", machine, bool(args.set_qlen))
    print(
        f"N = {args.messages:,} per run (1 KB: N/3, 10 KB: N/10), {args.rounds} round(s), "
        f"payloads random (incompressible); official client max_pending_messages = "
        f"{args.max_pending:,}",
        flush=True,
    )


def print_report(results: dict[str, Any], rows: list[RowResult], args: argparse.Namespace) -> None:
    med = statistics.median
    print()
    print(
        f"throughput (median of {args.rounds} round(s), sides alternating; (a) official client "
        f"at its best: send_async(payload, None) for all, then flush(); (a') the same with a "
        f"Python callback per message; (b) to_pulsar -> daemon: Sender datagrams, or "
        f"StreamSender with one flush at the end; kernel ceiling: a Python send() loop into a "
        f"Python recv_into() loop on a UNIX datagram socket, no daemon)"
    )
    width = 38
    header = f"{'':<{width}}" + "".join(f"{r.spec.name:>18}" for r in rows)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(header)

    def line(label: str, values: list[str]) -> None:
        print(f"{label:<{width}}" + "".join(f"{v:>18}" for v in values))

    line("messages per run", [f"{r.spec.messages:,}" for r in rows])

    def median_rate(runs: list[SideRun]) -> str:
        return f"{med(x.rate for x in runs):,.0f}" if runs else "-"

    line("rate (a) official client, msg/s", [median_rate(r.official) for r in rows])
    line("rate (a') official + callback, msg/s", [median_rate(r.official_callback) for r in rows])
    line("rate (b) daemon, msg/s", [median_rate(r.daemon) for r in rows])
    line("median ratio b/a", [f"{med(r.ratios()):.2f}" for r in rows])
    line("kernel ceiling, msg/s", [median_rate(r.ceiling) for r in rows])
    line(
        "(b) / kernel ceiling",
        [
            f"{med(x.rate for x in r.daemon) / med(x.rate for x in r.ceiling):.2f}"
            if r.ceiling
            else "-"
            for r in rows
        ],
    )
    line("  ratio b/a per round", [" ".join(f"{x:.2f}" for x in r.ratios()) for r in rows])
    line(
        "kernel ceiling CPU, µs/msg: receiver sender",
        [
            f"{med(x.daemon_cpu_us or 0 for x in r.ceiling):.2f} "
            f"{med(x.client_cpu_us for x in r.ceiling):.2f}"
            if r.ceiling
            else "-"
            for r in rows
        ],
    )
    line("daemon CPU, µs/msg", [f"{med(x.daemon_cpu_us or 0 for x in r.daemon):.2f}" for r in rows])
    line("sender CPU, µs/msg", [f"{med(x.client_cpu_us for x in r.daemon):.2f}" for r in rows])
    line(
        "official client CPU (a), µs/msg",
        [f"{med(x.client_cpu_us for x in r.official):.2f}" for r in rows],
    )
    line(
        "broker CPU (a), µs/msg", [f"{med(x.broker_cpu_us for x in r.official):.2f}" for r in rows]
    )
    line("broker CPU (b), µs/msg", [f"{med(x.broker_cpu_us for x in r.daemon):.2f}" for r in rows])
    line(
        "metrics scrapes per (b) run",
        [f"{med(x.scrapes or 0 for x in r.daemon):.0f}" for r in rows],
    )
    print(
        f"(daemon CPU includes serving the 5 ms /metrics polls: "
        f"{results['scrape_cpu_us']:.0f} µs of daemon CPU per scrape when idle)"
    )
    print(f"daemon: {results['daemon_argv']}")

    print()
    print(
        f"latency, 100 B at {args.latency_rate:,.0f} msg/s offered for "
        f"{args.latency_seconds:g} s: send -> consumer receive (official consumer, "
        f"send time embedded in each value)"
    )
    for lat in results["latency"]:
        label = "(b) to_pulsar -> daemon" if lat["side"] == "daemon" else "(a) official client"
        print(
            f"  {label:<24} p50 {lat.get('p50_ms', float('nan')):7.2f} ms   "
            f"p99 {lat.get('p99_ms', float('nan')):7.2f} ms   "
            f"max {lat.get('max_ms', float('nan')):7.2f} ms   "
            f"{lat['received']:,}/{lat['messages']:,} read (+{lat['duplicates']:,} duplicates), "
            f"offered {lat['offered_rate']:,.0f}/s"
        )
        if lat.get("daemon_receipt_ms"):
            h = lat["daemon_receipt_ms"]
            print(
                f"  {'':<24} daemon's own histogram, batch written -> receipt: "
                f"p50 <= {h['p50_le_ms']:g} ms, p99 <= {h['p99_le_ms']:g} ms (bucket bounds)"
            )

    print()
    print(f"memory: daemon RSS idle {results['idle_rss_mb']:.1f} MB (1 MB = 10^6 B)")
    hold = results.get("rss_hold")
    if hold:
        print(
            f"  holding {hold['messages']:,} unacked 100 B messages (broker killed): "
            f"RSS {hold['held_rss_mb']:.1f} MB (peak {hold['peak_rss_mb']:.1f} MB) = "
            f"{hold['ratio']:.2f} x payload ({hold['payload_mb']:.0f} MB); "
            f"growth from {hold['before_rss_mb']:.1f} MB = {hold['growth_ratio']:.2f} x payload"
        )
        print(
            f"  after restarting the broker all {hold['messages']:,} were acked in "
            f"{hold['redelivery_s']:.1f} s"
            if hold["ok"]
            else "  NOT all acked after restart"
        )
    else:
        print("  (hold test skipped; --rss-messages N runs it)")

    print_targets(results, rows, args)
    for output in results.get("profiles", []):
        print()
        print(summarize(Path(output), top=12))
    print()
    harness.print_footer(
        results, "no messages lost: every (b) run acked all it sent; every (a) receipt was OK"
    )


def print_targets(results: dict[str, Any], rows: list[RowResult], args: argparse.Namespace) -> None:
    """The issue's targets next to the figures (informational: only losses fail the run)."""
    med = statistics.median
    main_row = next((r for r in rows if r.spec.extras), None)
    stream_row = next((r for r in rows if r.spec.stream), None)
    checks: list[tuple[str, float, float, str]] = []
    if main_row:
        ratio_target = 1.2 if results["machine"]["max_dgram_qlen"] <= 10 else 1.5
        checks.append(
            ("median ratio b/a, 100 B datagrams", med(main_row.ratios()), ratio_target, ">=")
        )
        daemon_cpu = med(x.daemon_cpu_us or 0 for x in main_row.daemon)
        checks.append(("daemon CPU µs/msg, 100 B datagrams", daemon_cpu, 1.5, "<="))
        checks.append(
            ("Sender CPU µs/msg, 100 B", med(x.client_cpu_us for x in main_row.daemon), 1.5, "<=")
        )
    if stream_row:
        checks.append(("median ratio b/a, stream", med(stream_row.ratios()), 3.0, ">="))
        daemon_cpu = med(x.daemon_cpu_us or 0 for x in stream_row.daemon)
        checks.append(("daemon CPU µs/msg, stream", daemon_cpu, 0.5, "<="))
        sender_cpu = med(x.client_cpu_us for x in stream_row.daemon)
        checks.append(("StreamSender CPU µs/msg, 100 B", sender_cpu, 0.5, "<="))
    daemon_latency: dict[str, Any] = next(
        (x for x in results["latency"] if x["side"] == "daemon"), {}
    )
    if "p99_ms" in daemon_latency:
        checks.append(("p99 ms send -> consumer receive", daemon_latency["p99_ms"], 20.0, "<="))
    checks.append(("daemon RSS idle, MB", results["idle_rss_mb"], 40.0, "<="))
    if results.get("rss_hold"):
        checks.append(("RSS / payload holding 1M", results["rss_hold"]["ratio"], 1.5, "<="))
    print()
    print("targets (issue 10; informational, only lost messages fail the run)")
    for label, value, limit, op in checks:
        met = value >= limit if op == ">=" else value <= limit
        print(f"  {label:<36} {value:8.2f}  target {op} {limit:g}  {'met' if met else 'NOT MET'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="pulsar-bruce vs the official Pulsar client on one pulsar-lite broker",
    )
    parser.add_argument("--messages", type=int, help="N per run (default 300000; --quick 2000)")
    parser.add_argument("--rounds", type=int, help="rounds, alternating the sides (default 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny N, one round, short latency run, no 1M-message RSS test",
    )
    parser.add_argument(
        "--rss-messages", type=int, help="messages held for the RSS test (default 1000000; 0 skips)"
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=50_000.0,
        help="offered msg/s for the latency run (default 50000)",
    )
    parser.add_argument(
        "--latency-seconds", type=float, help="length of each latency run (default 3; --quick 0.5)"
    )
    parser.add_argument(
        "--max-pending",
        type=int,
        default=10_000,
        help="official client max_pending_messages (default 10000)",
    )
    harness.add_run_args(parser)
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="one extra 100 B (b) run under py-spy (not in the table); raw stacks to DIR",
    )
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = 2000 if args.quick else 300_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.rss_messages is None:
        args.rss_messages = 0 if args.quick else 1_000_000
    if args.latency_seconds is None:
        args.latency_seconds = 0.5 if args.quick else 3.0
    if args.messages < 1 or args.rounds < 1:
        parser.error("--messages and --rounds must be >= 1")
    return args


if __name__ == "__main__":
    harness.cli(main)
