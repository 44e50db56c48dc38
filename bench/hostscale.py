#!/usr/bin/env python3
"""K sending processes into ONE daemon vs K official-client processes, same broker, same run.

For each K in --senders, rounds alternate the two sides (which goes first alternates too):

official  K processes, each ``pulsar.Client`` + ``create_producer`` (batching),
          ``send_async(payload, None)`` for N messages, then ``flush()``; time from the
          first send of any of them until the last flush returned.
daemon    K processes, each ``to_pulsar.Sender`` (AnyPartition, blocking as by default)
          sending N 100-byte datagrams into the one daemon; time from the first send of
          any of them until ``pulsar_bruce_acked_total`` has grown by K*N (polled every
          5 ms; the accounting identity is checked in every scrape).

CPU of the daemon and of the broker comes from ``/proc/<pid>/stat`` over the run, as
cores used (CPU-seconds per second). Each sender reports how long its send loop was
off the CPU without waiting for one (blocked in a full send), how often it slept, and
how many sends gave up after the sender's timeout (EAGAIN; retried and counted).
Then a smaller pass (K x --verify-messages, each value stamped with (sender, seq))
is read back with the official consumer to check every sender's order per partition.
Exits 1 if anything was lost, discarded, duplicated or reordered (2 if the bench failed).

    python -m bench.hostscale --senders 1,2,4,8,12 --messages 300000 --rounds 3 \\
        --partitions 8 --set-qlen 512 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from typing import Any

from bench import harness
from bench.harness import BenchBase, Broker, Daemon
from bench.machine import MachineCpu, cpu_seconds
from bench.workers import STAMP
from tests.support.consume import consume

SIZE = 100
DAEMON_ARGS = ["--buffer-max-bytes", "512MiB"]
med = statistics.median


class HostScale(BenchBase):
    def senders(self, k: int, mode: str, params: dict[str, Any], name: str) -> list[Any]:
        """K workers of ``mode``, all READY (sender ``i`` gets ``sender_id`` i if asked)."""
        started = []
        for i in range(k):
            own = {**params, "sender_id": i} if "sender_id" in params else params
            started.append(self.worker(mode, own, f"{name}-k{k}-{i}"))
        return started

    def official(self, broker: Broker, k: int, topic: str) -> dict[str, Any]:
        n = self.args.messages
        params = {"service_url": broker.url, "topic": topic, "messages": n, "size": SIZE}
        params.update(keyed=False, max_pending=self.args.max_pending, callback=False)
        workers = self.senders(k, "official", params, "official")
        broker_cpu0, t_go = cpu_seconds(broker.pid), time.monotonic()
        for worker in workers:
            worker.go()
        results = [w.result(timeout=120 + n / 1000) for w in workers]
        wall = time.monotonic() - t_go
        broker_cpu = cpu_seconds(broker.pid) - broker_cpu0
        for i, r in enumerate(results):
            if r["t_last"] is None or r["receipts"] != n or r["errors"]:
                self.fail(f"official K={k} sender {i}: {r['receipts']} receipts, {r['errors']} bad")
        seconds = max(r["t_last"] or time.monotonic() for r in results) - min(
            r["t0"] for r in results
        )
        return side_summary(results, k * n, seconds, {"broker": broker_cpu / wall})

    def daemon(self, daemon: Daemon, broker: Broker, k: int, topic: str) -> dict[str, Any]:
        n, total = self.args.messages, k * self.args.messages
        params = {"socket": daemon.socket_path, "topic": topic, "messages": n, "size": SIZE}
        params.update(keyed=False, stream=self.args.stream, stream_socket=stream_path(daemon))
        workers = self.senders(k, "sender", params, "stream" if self.args.stream else "sender")
        base, scrapes0 = daemon.scrape(), daemon.scrapes
        daemon_cpu0, broker_cpu0 = cpu_seconds(daemon.pid), cpu_seconds(broker.pid)
        t_go = time.monotonic()
        for worker in workers:
            worker.go()
        t_done, bad_scrapes = daemon.poll_settled(
            base.settled + total, 120 + total / 1000, f"daemon K={k}"
        )
        cores = {
            "daemon": (cpu_seconds(daemon.pid) - daemon_cpu0) / (t_done - t_go),
            "broker": (cpu_seconds(broker.pid) - broker_cpu0) / (t_done - t_go),
        }
        results = [w.result(timeout=60) for w in workers]
        end = daemon.wait_settled(base.received + total, 60)
        self.check_daemon_run(f"daemon K={k}", base, end, total)
        if bad_scrapes or not end.identity_holds():
            self.fail(f"daemon K={k}: received != acked + discarded + buffered in {bad_scrapes}")
        if not all(r["flushed_ok"] for r in results):
            self.fail(f"daemon K={k}: a stream flush reported discards")
        out = side_summary(results, total, t_done - min(r["t0"] for r in results), cores)
        out.update(
            identity_violations=bad_scrapes,
            discarded=end.total_discarded - base.total_discarded,
            possible_duplicates=end.possible_duplicates - base.possible_duplicates,
            scrapes=daemon.scrapes - scrapes0,
        )
        return out

    def verify_order(self, daemon: Daemon, broker: Broker, k: int) -> dict[str, Any]:
        """K senders x V stamped messages into a fresh topic, read back: per sender per
        partition the sequence must increase, and every message arrive once."""
        v, partitions = self.args.verify_messages, self.args.partitions
        topic = f"hostscale-{self.run_id}-order-k{k}"
        self.warm_topic(daemon, topic, False, partitions)
        params = {"socket": daemon.socket_path, "topic": topic, "messages": v, "size": SIZE}
        params.update(keyed=False, sender_id=0, stream=self.args.stream)
        params["stream_socket"] = stream_path(daemon)
        workers = self.senders(k, "sender", params, "order")
        base = daemon.scrape()
        for worker in workers:
            worker.go()
        for worker in workers:
            worker.result(timeout=120 + v / 1000)
        end = daemon.wait_settled(base.received + k * v, 120)
        self.check_daemon_run(f"order pass K={k}", base, end, k * v)
        warm = 4 * partitions
        read = consume(broker.url, topic, k * v + warm, timeout=60 + k * v / 2000)
        last: dict[tuple[int, int], int] = {}
        seen: set[tuple[int, int]] = set()
        backwards = duplicates = 0
        for message in read:
            sender, seq = STAMP.unpack_from(message.value)
            if seq < 0:
                continue
            if (sender, seq) in seen:
                duplicates += 1
                continue
            seen.add((sender, seq))
            key = (sender, message.partition)
            backwards += seq < last.get(key, -1)
            last[key] = seq
        per_sender: defaultdict[int, set[int]] = defaultdict(set)
        for sender, partition in last:
            per_sender[sender].add(partition)
        out = {
            "senders": k,
            "messages": k * v,
            "read": len(seen),
            "missing": k * v - len(seen),
            "duplicates": duplicates,
            "backwards": backwards,
            "partitions_per_sender": sorted(len(p) for p in per_sender.values()),
        }
        if out["missing"] or duplicates or backwards:
            self.fail(f"order pass K={k}: {out}")
        return out


def stream_path(daemon: Daemon) -> str:
    return daemon.socket_path.removesuffix(".sock") + ".stream.sock"


def side_summary(
    results: list[dict[str, Any]], total: int, seconds: float, cores: dict[str, float]
) -> dict[str, Any]:
    """Aggregate rate and cores of one side's run, and what each sender saw."""
    each = total / len(results)
    per_sender = [
        {
            "send_rate": each / max(r["t_sent"] - r["t0"], 1e-9),
            "send_loop_s": r["t_sent"] - r["t0"],
            "blocked_s": r["blocked_s"],
            "runq_wait_s": r["runq_wait_s"],
            "sleeps": r["sleeps"],
            "send_timeouts": r.get("send_timeouts", 0),
            "cpu_s": r["cpu_s"],
        }
        for r in results
    ]
    cores = {**cores, "senders": sum(r["cpu_s"] for r in results) / seconds}
    return {"rate": total / seconds, "seconds": seconds, "cores": cores, "per_sender": per_sender}


def blocked_share(side: dict[str, Any]) -> str:
    """Each sender's send loop: the share of it spent blocked."""
    return "/".join(f"{s['blocked_s'] / s['send_loop_s']:.0%}" for s in side["per_sender"])


def run_k(bench: HostScale, broker: Broker, daemon: Daemon, k: int) -> dict[str, Any]:
    topic_a = f"hostscale-{bench.run_id}-official-k{k}"
    topic_b = f"hostscale-{bench.run_id}-daemon-k{k}"
    bench.warm_topic(daemon, topic_b, False, bench.args.partitions)
    rounds = []
    for round_no in range(1, bench.args.rounds + 1):
        if round_no % 2:
            a, b = bench.official(broker, k, topic_a), bench.daemon(daemon, broker, k, topic_b)
        else:
            b, a = bench.daemon(daemon, broker, k, topic_b), bench.official(broker, k, topic_a)
        rounds.append({"official": a, "daemon": b, "ratio": b["rate"] / a["rate"]})
        timeouts = sum(s["send_timeouts"] for s in b["per_sender"])
        print(
            f"  K={k:<2} round {round_no}: official {a['rate']:>10,.0f} msg/s "
            f"(broker {a['cores']['broker']:.2f} cores, clients {a['cores']['senders']:.2f}; "
            f"send loops blocked {blocked_share(a)})\n"
            f"  {'':<14}daemon   {b['rate']:>10,.0f} msg/s (daemon {b['cores']['daemon']:.2f} "
            f"cores, broker {b['cores']['broker']:.2f}, senders {b['cores']['senders']:.2f}; "
            f"blocked {blocked_share(b)}, sleeps "
            f"{'/'.join(str(s['sleeps']) for s in b['per_sender'])}, EAGAIN {timeouts}, "
            f"discarded {b['discarded']})  ratio {b['rate'] / a['rate']:.2f}",
            flush=True,
        )
    out: dict[str, Any] = {"senders": k, "rounds": rounds}
    out["median"] = {
        "official_rate": med(r["official"]["rate"] for r in rounds),
        "daemon_rate": med(r["daemon"]["rate"] for r in rounds),
        "ratio": med(r["ratio"] for r in rounds),
        "daemon_cores": med(r["daemon"]["cores"]["daemon"] for r in rounds),
        "broker_cores_daemon_side": med(r["daemon"]["cores"]["broker"] for r in rounds),
        "broker_cores_official_side": med(r["official"]["cores"]["broker"] for r in rounds),
        "sender_cores": med(r["daemon"]["cores"]["senders"] for r in rounds),
        "official_client_cores": med(r["official"]["cores"]["senders"] for r in rounds),
        "sender_blocked_share": med(
            s["blocked_s"] / s["send_loop_s"] for r in rounds for s in r["daemon"]["per_sender"]
        ),
        "official_blocked_share": med(
            s["blocked_s"] / s["send_loop_s"] for r in rounds for s in r["official"]["per_sender"]
        ),
    }
    if bench.args.verify_messages:
        out["order"] = bench.verify_order(daemon, broker, k)
    return out


def print_report(results: dict[str, Any], args: argparse.Namespace) -> None:
    rows = results["k"]
    sends = "StreamSender.send and its one flush" if args.stream else "Sender.send"
    print()
    print(
        f"{args.messages:,} x {SIZE} B per sender, {args.partitions} partitions, median of "
        f"{args.rounds} round(s); cores = CPU-seconds per second over the run"
    )
    head = (
        f"{'K':>3} {'official msg/s':>15} {'daemon msg/s':>13} {'ratio':>6} {'daemon':>7} "
        f"{'broker(d)':>9} {'broker(o)':>9} {'senders':>8} {'clients':>8} "
        f"{'blocked(d)':>10} {'blocked(o)':>10} {'EAGAIN':>6} {'identity':>8}"
    )
    print(head)
    for row in rows:
        m = row["median"]
        daemon_runs = [r["daemon"] for r in row["rounds"]]
        eagain = sum(s["send_timeouts"] for d in daemon_runs for s in d["per_sender"])
        identity = "held" if not any(d["identity_violations"] for d in daemon_runs) else "BROKEN"
        print(
            f"{row['senders']:>3} {m['official_rate']:>15,.0f} {m['daemon_rate']:>13,.0f} "
            f"{m['ratio']:>6.2f} {m['daemon_cores']:>7.2f} {m['broker_cores_daemon_side']:>9.2f} "
            f"{m['broker_cores_official_side']:>9.2f} {m['sender_cores']:>8.2f} "
            f"{m['official_client_cores']:>8.2f} {m['sender_blocked_share']:>10.0%} "
            f"{m['official_blocked_share']:>10.0%} {eagain:>6} {identity:>8}"
        )
    print(
        "daemon/broker(d)/senders: the daemon side's cores; broker(o)/clients: the official "
        "side's; blocked: median share of a sender's send loop spent blocked (off CPU, not "
        f"waiting for one): (d) in {sends}, (o) in send_async with max_pending_messages "
        f"{args.max_pending:,} outstanding; EAGAIN: sends that timed out and were retried"
    )
    best = max(rows, key=lambda row: row["median"]["daemon_rate"])
    m = best["median"]
    print(
        f"one daemon's ceiling here: {m['daemon_rate']:,.0f} msg/s (K={best['senders']}), the "
        f"daemon using {m['daemon_cores']:.2f} cores; its senders blocked "
        f"{m['sender_blocked_share']:.0%} of their send loops"
    )
    for row in rows:
        order = row.get("order")
        if order:
            print(
                f"order check K={order['senders']}: {order['read']:,}/{order['messages']:,} read "
                f"back, {order['missing']} missing, {order['duplicates']} duplicates, "
                f"{order['backwards']} out of order per sender per partition (partitions "
                f"used per sender: {order['partitions_per_sender']})"
            )
    order = "; order kept" if args.verify_messages else ""
    harness.print_footer(
        results,
        "nothing lost: every daemon run acked all K*N, none discarded, the identity held in "
        f"every scrape; every official receipt OK{order}",
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, cpu_before = time.monotonic(), MachineCpu.now()
    results: dict[str, Any] = {"config": vars(args), "k": []}
    with contextlib.ExitStack() as stack:
        workdir, machine = harness.open_run(stack, args)
        harness.print_machine("pulsar-bruce host scaling bench", machine, bool(args.set_qlen))
        if max(args.senders) + 2 > (machine["cores_usable"] or 1):
            print(f"note: K up to {max(args.senders)} on {machine['cores_usable']} usable cores")
        bench = HostScale(args, workdir)
        stack.callback(bench.kill_workers)
        broker = Broker(workdir / "broker", partitions=args.partitions)
        broker.start()
        stack.callback(broker.stop)
        daemon = Daemon(workdir / "daemon", broker.url, DAEMON_ARGS)
        stack.callback(daemon.stop)
        results["daemon_argv"] = " ".join(daemon.argv[1:])
        for k in args.senders:
            results["k"].append(run_k(bench, broker, daemon, k))
            harness.write_json(args.json, results)
    harness.close_results(results, machine, started, cpu_before, bench.failures)
    print_report(results, args)
    harness.write_json(args.json, results)
    return 1 if bench.failures else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="K senders into one daemon vs K official-client processes, one broker"
    )
    parser.add_argument(
        "--senders",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2, 4, 8, 12],
        help="comma-separated K values (default 1,2,4,8,12)",
    )
    parser.add_argument("--messages", type=int, default=300_000, help="N per sender per run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per K, sides alternating")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of every topic")
    parser.add_argument(
        "--verify-messages",
        type=int,
        default=20_000,
        help="per sender in the order-check pass after each K (0 skips it)",
    )
    parser.add_argument("--max-pending", type=int, default=10_000, help="official client's")
    parser.add_argument(
        "--stream", action="store_true", help="daemon side: StreamSender, one flush at the end"
    )
    harness.add_run_args(parser)
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or min(args.senders) < 1 or args.partitions < 1:
        parser.error("--messages, --rounds, --senders and --partitions must be >= 1")
    return args


if __name__ == "__main__":
    harness.cli(main)
