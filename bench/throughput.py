#!/usr/bin/env python3
"""Throughput, CPU, latency and memory of pulsar-bruce against the official Pulsar client.

One command, one broker at a time (pulsar-lite, Apache Pulsar standalone, or each in
turn with ``--broker both``; free ports, a temp dir; see ``bench/brokers.py``), one
daemon per broker; the two sides of every comparison run alternately, round after round:

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
    python -m bench.throughput --broker both   # every row on pulsar-lite, then Apache Pulsar
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench import brokers, harness
from bench.brokers import Brokers
from bench.harness import Daemon
from bench.machine import MachineCpu, cpu_seconds, memory_kib
from bench.throughput_bench import DAEMON_ARGS, Bench
from bench.throughput_report import print_machine, print_report
from bench.throughput_rows import RowResult, row_json, row_specs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    cpu_before = MachineCpu.now()
    with contextlib.ExitStack() as stack:
        workdir, machine = harness.open_run(stack, args)
        print_machine(machine, args)
        bench = Bench(args, workdir)
        stack.callback(bench.kill_workers)
        results: dict[str, Any] = {"config": config_summary(args), "brokers": []}
        runs = []
        for kind in brokers.kinds(args.broker):
            broker_results, rows = run_on(bench, stack, kind)
            results["brokers"].append(broker_results)
            runs.append((broker_results, rows))
    results["machine"] = machine
    results["wall_s"] = time.monotonic() - started
    results.update(MachineCpu.now().since(cpu_before))
    results["lost"] = bench.failures
    results["profiles"] = [str(path) for path in bench.profile_outputs]
    print_report(results, runs, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 1 if bench.failures else 0


def run_on(
    bench: Bench, stack: contextlib.ExitStack, kind: str
) -> tuple[dict[str, Any], list[RowResult]]:
    """Every measurement on one kind of broker; its brokers are stopped before it returns."""
    args = bench.args
    specs = row_specs(args.messages)
    pool = Brokers(kind, bench.workdir / kind, on_start=bench.warm_broker)
    stack.callback(pool.stop)
    warmups = len(bench.warmups)

    # Phase 1: 4-partition topics, for the PartitionKey row.
    print(f"{kind}: phase 1: topics of 4 partitions", flush=True)
    broker4 = pool.get(4)
    daemon4 = Daemon(bench.workdir / f"{kind}-daemon4", broker4.url, DAEMON_ARGS)
    stack.callback(daemon4.stop)
    rows4 = bench.throughput_rows(broker4, daemon4, [s for s in specs if s.partitions == 4])
    daemon4.stop()

    # Phase 2: 1-partition (pulsar-lite) or non-partitioned (Apache Pulsar) topics.
    print(f"{kind}: phase 2: topics of 1 partition", flush=True)
    broker = pool.get(1)
    results: dict[str, Any] = {"broker": kind, "label": broker.label}
    daemon = Daemon(bench.workdir / f"{kind}-daemon1", broker.url, DAEMON_ARGS)
    stack.callback(daemon.stop)
    time.sleep(0.5)
    results["idle_rss_mb"] = memory_kib(daemon.pid)["VmRSS"] * 1024 / 1e6
    results["daemon_argv"] = " ".join(daemon.argv[1:])
    results["scrape_cpu_us"] = scrape_cost(daemon)
    plain = [s for s in specs if s.partitions == 1 and not s.journal]
    rows1 = bench.throughput_rows(broker, daemon, plain)
    journal_args = [*DAEMON_ARGS, "--spool-dir", str(bench.workdir / f"{kind}-journal-state")]
    journalled = Daemon(bench.workdir / f"{kind}-daemon-journal", broker.url, journal_args)
    stack.callback(journalled.stop)
    journal_specs = [s for s in specs if s.journal]
    rows1 += bench.throughput_rows(broker, journalled, journal_specs)
    journalled.stop()
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
    pool.stop()
    started = bench.warmups[warmups:]
    results["warmup"] = {
        "messages": args.warmup,
        "rate": statistics.median(w["rate"] for w in started),
        "idle_cores": statistics.median(w["idle_cores"] for w in started),
        "each": started,
    }
    return results, rows


def scrape_cost(daemon: Daemon, scrapes: int = 200) -> float:
    """Daemon CPU per polling scrape (the counters only) while idle (µs): context for the
    5 ms polling."""
    cpu0 = cpu_seconds(daemon.pid)
    for _ in range(scrapes):
        daemon.scrape(cheap=True)
    return (cpu_seconds(daemon.pid) - cpu0) / scrapes * 1e6


def config_summary(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "messages": args.messages,
        "rounds": args.rounds,
        "max_pending": args.max_pending,
        "latency_rate": args.latency_rate,
        "latency_seconds": args.latency_seconds,
        "rss_messages": args.rss_messages,
        "broker": args.broker,
        "warmup": args.warmup,
        "official_compression": args.official_compression,
    }


def add_official_compression(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--official-compression",
        choices=("lz4", "none"),
        default="lz4",
        help="the official client's compression_type (default lz4: the daemon's default "
        "codec, so both sides use the same one)",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="pulsar-bruce vs the official Pulsar client, on pulsar-lite and/or Apache "
        "Pulsar standalone",
    )
    parser.add_argument(
        "--broker",
        choices=brokers.CHOICES,
        default="lite",
        help="pulsar-lite (default), Apache Pulsar standalone (Java 17, Maven), both in turn, "
        "or a three-broker Apache Pulsar cluster",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        help="official-client messages through each broker as it starts, not measured "
        "(default 5000; --quick 1000)",
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
    add_official_compression(parser)
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
    if args.warmup is None:
        args.warmup = 1000 if args.quick else 5000
    if args.latency_seconds is None:
        args.latency_seconds = 0.5 if args.quick else 3.0
    if args.messages < 1 or args.rounds < 1:
        parser.error("--messages and --rounds must be >= 1")
    return args


if __name__ == "__main__":
    harness.cli(main)
