#!/usr/bin/env python3
"""Many senders at moderate rates, as hosts really run (issue 37): what each side costs.

For each K in ``--senders`` and each size in ``--sizes``, K processes send at a steady,
paced rate each (``--total-rate`` / K, or ``--rate``) for ``--seconds`` JSON-like values
(``--payload``; a stamp of send time and sequence first), to one topic of
``--partitions`` partitions, on the broker of ``--broker`` (Apache Pulsar standalone by
default), the two sides one after the other (which goes first alternates per row):

(a) the official client embedded in every process: ``pulsar.Client`` + a batching
    producer (compression ``--official-compression``, LZ4 by default: the daemon's),
    ``send_async(value, None)`` per message, ``flush()`` at the end;
(b) ``to_pulsar.Sender`` in every process -> one pulsar-bruce daemon (started fresh for
    the row, its defaults: LZ4, batching).

Measured per side: CPU seconds of the senders (``time.process_time()`` in each, from
its first send until its flush returned or its last send), of the daemon and of the
broker (``/proc/<pid>/stat``, from GO until the last message was persisted), per
message in total and on the host (senders + daemon), the entries the broker wrote
(its managed ledgers' ``entriesAddedCounter``; Apache Pulsar only), the peak RSS of
the side's processes (``VmHWM``), and send -> receive latency p50/p99 from an official
consumer reading every message back meanwhile. Exits 1 if a message was lost (not
acked, or not read back).

    python -m bench.many_senders                        # K = 16, 64; 200 B and 1 KB; 20 s
    python -m bench.many_senders --senders 16 --sizes 200 --seconds 5 --broker lite
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Any

from bench import brokers, harness
from bench.brokers import BenchBroker, Brokers
from bench.harness import Daemon
from bench.machine import MachineCpu, cpu_seconds, memory_kib
from bench.payloads import KINDS
from bench.throughput import add_official_compression
from bench.throughput_bench import DAEMON_ARGS, Bench

SIDES = ("official", "daemon")
#: Distinct values per sender (each seeded apart): few enough that they add little to
#: every process's RSS (256 KB at 1 KB), many enough that no batch repeats one.
POOL = 256


class ManySenders(Bench):
    """One row: K paced senders of one size, each side in turn."""

    def run_side(
        self, side: str, broker: BenchBroker, daemon: Daemon | None, row: dict[str, Any]
    ) -> dict[str, Any]:
        k, rate, per, size = row["senders"], row["rate"], row["per_sender"], row["size"]
        total = k * per
        topic = f"senders-{self.run_id}-k{k}-{size}-{side}"
        broker.make_partitioned(topic, self.args.partitions)
        common = {"topic": topic, "messages": per, "size": size, "rate": rate, "keyed": False}
        common.update(payload=self.args.payload, pool=POOL)
        if daemon is not None:
            self.warm_topic(daemon, topic, False, self.args.partitions)
            common["socket"] = daemon.socket_path
            mode = "sender"
        else:
            common.update(service_url=broker.url, max_pending=self.args.max_pending)
            common.update(callback=False, compression=self.args.official_compression)
            mode = "official"
        params = [{**common, "seed": i, "seq_base": i * per} for i in range(k)]
        reader = {"service_url": broker.url, "topic": topic, "messages": total}
        reader.update(timeout=self.args.seconds + 120, idle_timeout=20.0)
        consumer = self.worker("consumer", reader, f"consumer-{side}-k{k}")
        senders = self.start_workers(mode, params, f"{side}-k{k}")
        entries0 = broker.entries_added(topic, self.args.partitions)
        base = daemon.scrape() if daemon is not None else None
        daemon_cpu0 = cpu_seconds(daemon.pid) if daemon is not None else 0.0
        broker_cpu0, t_go = cpu_seconds(broker.pid), time.monotonic()
        consumer.go()
        for worker in senders:
            worker.go()
        results = [w.result(timeout=self.args.seconds * 3 + 120) for w in senders]
        out: dict[str, Any] = {"side": side, "topic": topic}
        if daemon is not None and base is not None:
            daemon.poll_settled(base.settled + total, 120, f"{side} K={k}")  # after the sends
            out["daemon_cpu_s"] = cpu_seconds(daemon.pid) - daemon_cpu0
            out["daemon_peak_rss_mb"] = memory_kib(daemon.pid)["VmHWM"] / 1024
            end = daemon.wait_settled(base.received + total, 60)
            self.check_daemon_run(f"{side} K={k} {size} B", base, end, total)
        else:
            bad = [r for r in results if r["t_last"] is None or r["errors"] or r["receipts"] != per]
            if bad:
                self.fail(f"{side} K={k} {size} B: {len(bad)} clients not all persisted")
        out["wall_s"] = time.monotonic() - t_go
        out["broker_cpu_s"] = cpu_seconds(broker.pid) - broker_cpu0
        got = consumer.result(timeout=self.args.seconds + 180)
        entries1 = broker.entries_added(topic, self.args.partitions)
        out["entries"] = None if entries0 is None or entries1 is None else entries1 - entries0
        out["senders_cpu_s"] = sum(r["cpu_s"] for r in results)
        out["senders_peak_rss_mb"] = sum(r["peak_rss_kib"] for r in results) / 1024
        out["offered_rate"] = statistics.median(per / (r["t_sent"] - r["t0"]) for r in results)
        out.update(read=got["received"], duplicates=got["duplicates"], **got["latencies"])
        if got["received"] != total:
            self.fail(f"{side} K={k} {size} B: read back {got['received']:,} of {total:,}")
        return summarise(out, total)

    def run_floor(self, row: dict[str, Any]) -> dict[str, Any]:
        """The same K paced loops alone (:meth:`~bench.harness.BenchBase.run_paced_loops`)."""
        return self.run_paced_loops(row, self.args.payload, POOL)


def summarise(out: dict[str, Any], total: int) -> dict[str, Any]:
    """Per-message and per-side totals of one side's run."""
    host = out["senders_cpu_s"] + out.get("daemon_cpu_s", 0.0)
    out["host_cpu_s"] = host
    out["total_cpu_s"] = host + out["broker_cpu_s"]
    out["host_us_per_msg"] = host / total * 1e6
    out["total_us_per_msg"] = out["total_cpu_s"] / total * 1e6
    out["peak_rss_mb"] = out["senders_peak_rss_mb"] + out.get("daemon_peak_rss_mb", 0.0)
    return out


def run_row(bench: ManySenders, broker: BenchBroker, row: dict[str, Any], first: str) -> None:
    """Both sides of one row (a fresh daemon for its side), ``first`` first."""
    for side in (first, *(s for s in SIDES if s != first)):
        daemon = None
        if side == "daemon":
            daemon = Daemon(
                bench.workdir / f"daemon-k{row['senders']}-{row['size']}", broker.url, DAEMON_ARGS
            )
        try:
            row[side] = bench.run_side(side, broker, daemon, row)
        finally:
            if daemon is not None:
                row["daemon_argv"] = " ".join(daemon.argv[1:])
                daemon.stop()
        print_side(row, side)
    a, b = row["official"], row["daemon"]
    row["ratios"] = {
        "total_cpu": b["total_cpu_s"] / a["total_cpu_s"],
        "host_cpu": b["host_cpu_s"] / a["host_cpu_s"],
        "peak_rss": b["peak_rss_mb"] / a["peak_rss_mb"],
    }
    if bench.args.floor:
        floor = row["loop"] = bench.run_floor(row)
        above = [r["host_cpu_s"] - floor["senders_cpu_s"] for r in (a, b)]
        row["ratios"]["host_above_loop"] = above[1] / above[0] if above[0] > 0 else None
        print(
            f"  K={row['senders']} x {row['rate']:,.0f}/s x {row['size']} B loop alone: CPU s "
            f"{floor['senders_cpu_s']:.2f} ({floor['us_per_msg']:.1f} µs/msg), peak RSS "
            f"{floor['peak_rss_mb']:,.0f} MB; host CPU above it: (a) {above[0]:.2f} s, "
            f"(b) {above[1]:.2f} s",
            flush=True,
        )


def print_side(row: dict[str, Any], side: str) -> None:
    r = row[side]
    daemon = f", daemon {r['daemon_cpu_s']:.2f}" if "daemon_cpu_s" in r else ""
    entries = f"{r['entries']:,}" if r["entries"] is not None else "n/a"
    print(
        f"  K={row['senders']} x {row['rate']:,.0f}/s x {row['size']} B {side:<8}: CPU s "
        f"senders {r['senders_cpu_s']:.2f}{daemon}, broker {r['broker_cpu_s']:.2f} (each "
        f"sent at {r['offered_rate']:,.0f}/s); "
        f"{r['total_us_per_msg']:.1f} µs/msg ({r['host_us_per_msg']:.1f} host); entries "
        f"{entries}; peak RSS {r['peak_rss_mb']:,.0f} MB; p50/p99 {r.get('p50_ms', 0):.1f}/"
        f"{r.get('p99_ms', 0):.1f} ms; read {r['read']:,}",
        flush=True,
    )


def print_report(results: dict[str, Any]) -> None:
    args = results["config"]
    print()
    print(
        f"{args['payload']} values, {args['partitions']} partitions, {args['seconds']:g} s per "
        f"side; (a) official client in each process (compression {args['official_compression']}"
        f"), (b) to_pulsar.Sender in each -> one daemon (lz4); CPU seconds over the run"
    )
    cols = [
        ("senders", lambda r: f"{r['senders_cpu_s']:.2f}"),
        ("daemon", lambda r: f"{r['daemon_cpu_s']:.2f}" if "daemon_cpu_s" in r else "-"),
        ("broker", lambda r: f"{r['broker_cpu_s']:.2f}"),
        ("µs/msg", lambda r: f"{r['total_us_per_msg']:.1f}"),
        ("host µs/msg", lambda r: f"{r['host_us_per_msg']:.1f}"),
        ("entries", lambda r: f"{r['entries']:,}" if r["entries"] is not None else "n/a"),
        ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:,.0f}"),
        ("p50/p99 ms", lambda r: f"{r.get('p50_ms', 0):.1f}/{r.get('p99_ms', 0):.1f}"),
        ("read back", lambda r: f"{r['read']:,}"),
    ]
    print(f"{'row':<28}{'side':<10}" + "".join(f"{name:>14}" for name, _ in cols))
    for row in results["rows"]:
        label = f"K={row['senders']} x {row['rate']:,.0f}/s x {row['size']} B"
        for side in SIDES:
            cells = "".join(f"{fmt(row[side]):>14}" for _, fmt in cols)
            print(f"{label if side == 'official' else '':<28}{side:<10}{cells}")
        ratio = row["ratios"]
        print(
            f"{'':<28}{'b/a':<10} total CPU {ratio['total_cpu']:.2f}x (target 0.5x at K=16, "
            f"0.33x at K=64), host {ratio['host_cpu']:.2f}x (target 0.4x), peak RSS "
            f"{ratio['peak_rss']:.2f}x"
        )
        if "loop" in row:
            floor, above = row["loop"], ratio["host_above_loop"]
            print(
                f"{'':<28}{'loop':<10} the paced loop alone, sending nothing: "
                f"{floor['senders_cpu_s']:.2f} CPU s ({floor['us_per_msg']:.1f} µs/msg), "
                f"{floor['peak_rss_mb']:,.0f} MB; host CPU above it b/a "
                + (f"{above:.2f}x" if above is not None else "n/a")
            )
    harness.print_footer(results, "nothing lost: every message acked or persisted, and read back")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, cpu_before = time.monotonic(), MachineCpu.now()
    results: dict[str, Any] = {"config": vars(args) | {"json": str(args.json)}, "rows": []}
    with contextlib.ExitStack() as stack:
        workdir, machine = harness.open_run(stack, args)
        harness.print_machine("pulsar-bruce many-senders bench", machine, bool(args.set_qlen))
        bench = ManySenders(args, workdir)
        stack.callback(bench.kill_workers)
        pool = Brokers(args.broker, workdir / args.broker, on_start=bench.warm_broker)
        stack.callback(pool.stop)
        broker = pool.get(args.partitions)
        results["broker"] = broker.label
        for k in args.senders:
            for size in args.sizes:
                rate = args.rate or args.total_rate / k
                row = {"senders": k, "size": size, "rate": rate}
                row["per_sender"] = max(1, int(rate * args.seconds))
                run_row(bench, broker, row, SIDES[len(results["rows"]) % 2])
                results["rows"].append(row)
                harness.write_json(args.json, results)
    harness.close_results(results, machine, started, cpu_before, bench.failures)
    print_report(results)
    harness.write_json(args.json, results)
    return 1 if bench.failures else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="K paced sender processes: the official client in each vs to_pulsar.Sender "
        "-> one daemon"
    )

    def numbers(text: str) -> list[int]:
        return [int(x) for x in text.split(",")]

    parser.add_argument("--broker", choices=brokers.KINDS, default="apache")
    parser.add_argument("--senders", type=numbers, default=[16, 64], help="K values (16,64)")
    parser.add_argument("--sizes", type=numbers, default=[200, 1000], help="bytes (200,1000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="per side (default 20)")
    parser.add_argument(
        "--total-rate", type=float, default=16_000.0, help="msg/s of all K together (16000)"
    )
    parser.add_argument("--rate", type=float, help="msg/s of each sender (overrides the total)")
    parser.add_argument("--payload", choices=KINDS, default="json", help="values (json)")
    parser.add_argument("--partitions", type=int, default=4, help="of the topic (default 4)")
    parser.add_argument("--max-pending", type=int, default=10_000, help="official client's")
    parser.add_argument("--warmup", type=int, default=5000, help="broker warm-up messages")
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the run of the paced loops alone (what the application's loop costs)",
    )
    add_official_compression(parser)
    harness.add_run_args(parser)
    args = parser.parse_args(argv)
    args.quick = False  # Bench.warm_broker reads it
    if args.seconds <= 0 or min(args.senders) < 1 or min(args.sizes) < 1 + 16:
        parser.error("--seconds must be > 0, --senders >= 1, --sizes >= 17 (the stamp)")
    return args


if __name__ == "__main__":
    harness.cli(main)
