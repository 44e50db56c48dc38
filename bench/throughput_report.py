"""The report of ``bench/throughput.py``: the machine; then, per broker, the throughput
table, latency, memory and the issue's targets; with both brokers, the ratios side by side."""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import harness
from bench.profile_summary import summarize

if TYPE_CHECKING:
    from bench.throughput_rows import RowResult, SideRun

#: One broker's results and its rows, as ``throughput.run_on`` returns them.
Run = tuple[dict[str, Any], list["RowResult"]]


def print_machine(machine: dict[str, Any], args: argparse.Namespace) -> None:
    harness.print_machine("pulsar-bruce throughput bench", machine, bool(args.set_qlen))
    print(
        f"N = {args.messages:,} per run (1 KB: N/3, 10 KB: N/10), {args.rounds} round(s), "
        f"payloads random (incompressible) except the json rows (JSON-like records, LZ4 "
        f"saves ~60 %); official client compression {args.official_compression}, daemon lz4 "
        f"(its default); official client max_pending_messages = {args.max_pending:,}",
    )
    print(
        f"broker(s): {args.broker} (each started by the bench, one up at a time; "
        f"as each starts, {args.warmup:,} x 100 B through the official client warm it up "
        f"(the JVM's JIT), not measured, then its idle CPU is sampled)",
        flush=True,
    )


def print_report(results: dict[str, Any], runs: list[Run], args: argparse.Namespace) -> None:
    for broker_results, rows in runs:
        print_broker(broker_results, rows, args, results["machine"])
    if len(runs) > 1:
        print_comparison(runs, args)
    for output in results.get("profiles", []):
        print()
        print(summarize(Path(output), top=12))
    print()
    harness.print_footer(
        results, "no messages lost: every (b) run acked all it sent; every (a) receipt was OK"
    )


def print_broker(
    results: dict[str, Any],
    rows: list[RowResult],
    args: argparse.Namespace,
    machine: dict[str, Any],
) -> None:
    """One broker's part: throughput table, latency, memory, targets."""
    med = statistics.median
    print()
    print(f"=== on {results['label']} ===")
    warm = results["warmup"]
    print(
        f"warm-up (not measured): {warm['messages']:,} x 100 B through the official client at "
        f"{warm['rate']:,.0f} msg/s; broker idle afterwards: {warm['idle_cores']:.1%} of a core"
    )
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

    print_targets(results, rows, machine)


def print_targets(results: dict[str, Any], rows: list[RowResult], machine: dict[str, Any]) -> None:
    """The issue's targets next to the figures (informational: only losses fail the run)."""
    med = statistics.median
    main_row = next((r for r in rows if r.spec.extras), None)
    stream_row = next((r for r in rows if r.spec.stream), None)
    checks: list[tuple[str, float, float, str]] = []
    if main_row:
        ratio_target = 1.2 if machine["max_dgram_qlen"] <= 10 else 1.5
        if results["broker"] != "lite":  # issue 37: 2.0x on Apache Pulsar
            ratio_target = 2.0
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
    for row in rows:  # issue 37: JSON-like 1 KB and 10 KB, the same codec on both sides
        if row.spec.payload == "json" and not row.spec.stream:
            checks.append((f"median ratio b/a, {row.spec.name}", med(row.ratios()), 1.3, ">="))
    journal_row = next((r for r in rows if r.spec.journal), None)
    if main_row and journal_row:  # issue 37: the journal at 0.9x of no journal or better
        journal = med(x.rate for x in journal_row.daemon) / med(x.rate for x in main_row.daemon)
        checks.append(("(b) with journal / without, 100 B", journal, 0.9, ">="))
    daemon_latency: dict[str, Any] = next(
        (x for x in results["latency"] if x["side"] == "daemon"), {}
    )
    if "p99_ms" in daemon_latency:
        checks.append(("p99 ms send -> consumer receive", daemon_latency["p99_ms"], 20.0, "<="))
    checks.append(("daemon RSS idle, MB", results["idle_rss_mb"], 40.0, "<="))
    if results.get("rss_hold"):
        checks.append(("RSS / payload holding 1M", results["rss_hold"]["ratio"], 1.5, "<="))
    print()
    print("targets (issues 10 and 37; informational, only lost messages fail the run)")
    for label, value, limit, op in checks:
        met = value >= limit if op == ">=" else value <= limit
        print(f"  {label:<36} {value:8.2f}  target {op} {limit:g}  {'met' if met else 'NOT MET'}")


def print_comparison(runs: list[Run], args: argparse.Namespace) -> None:
    """Per row, on each broker: (a), (b), their median ratio, and the broker's CPU per message."""
    med = statistics.median
    print()
    print(
        f"daemon vs the official client on each broker (median of {args.rounds} round(s); the "
        f"same N and settings on both; (a) official client without per-message callbacks, "
        f"(b) to_pulsar -> daemon; broker CPU in µs/msg during (a) | (b))"
    )
    width, cell = 18, 44
    print(f"{'':<{width}}" + "".join(f"{r['label'][: cell - 2]:<{cell}}" for r, _ in runs))
    sub = f"{'(a) msg/s':>10} {'(b) msg/s':>10} {'b/a':>5} {'broker a|b':>14}  "
    print(f"{'row':<{width}}" + sub * len(runs))
    names = [row.spec.name for row in runs[0][1]]
    for name in names:
        cells = []
        for _, rows in runs:
            row = next(r for r in rows if r.spec.name == name)
            a = med(x.rate for x in row.official)
            b = med(x.rate for x in row.daemon)
            broker_a = med(x.broker_cpu_us for x in row.official)
            broker_b = med(x.broker_cpu_us for x in row.daemon)
            cpu = f"{broker_a:.2f} | {broker_b:.2f}"
            cells.append(f"{a:>10,.0f} {b:>10,.0f} {med(row.ratios()):>5.2f} {cpu:>14}  ")
        print(f"{name:<{width}}" + "".join(cells))
