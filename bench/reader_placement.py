"""Where the compiled intake reads: ``python -m bench.reader_placement``.

One 100 B ``Sender`` into a fresh daemon per run, the reader forced onto its receive
thread or onto the event loop (``PULSAR_BRUCE_RECEIVE``), rounds alternating, one
pulsar-lite broker. Reported per run: msg/s (first send until ``acked`` grew by N),
the daemon's CPU per datagram and its context switches (all threads, from ``/proc``).
Nothing is asserted on timing; a run that loses a message fails the bench.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchError, Daemon, add_run_args, cli, open_run, print_machine
from bench.machine import cpu_seconds, read_qlen
from tests.support.processes import Broker

MODES = ("thread", "loop")


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``pid`` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if "ctxt_switches:" in line:
                total += int(line.split()[1])
    return total


def run_once(workdir: Path, broker: Broker, mode: str, n: int, index: int) -> dict[str, Any]:
    from to_pulsar import Sender

    os.environ["PULSAR_BRUCE_RECEIVE"] = mode
    daemon = Daemon(workdir / f"daemon-{index}-{mode}", broker.url, [])
    try:
        daemon.warm_up("placement", 1)
        base = daemon.counters(cheap=True).settled
        payloads = [os.urandom(100) for _ in range(4096)]
        cpu0, switches0 = cpu_seconds(daemon.pid), context_switches(daemon.pid)
        t0 = time.monotonic()
        with Sender(daemon.socket_path, timeout=None) as sender:
            send = sender.send
            for i in range(n):
                send("placement", payloads[i & 4095])
        t_end, _ = daemon.poll_settled(base + n, 120, f"{mode} run")
        end = daemon.counters(cheap=True)
        if end.acked - base < n:
            raise BenchError(f"{mode} run: {end.acked - base} of {n} acked")
        return {
            "mode": mode,
            "rate": n / (t_end - t0),
            "daemon_cpu_us": (cpu_seconds(daemon.pid) - cpu0) / n * 1e6,
            "context_switches": context_switches(daemon.pid) - switches0,
        }
    finally:
        daemon.stop()
        os.environ.pop("PULSAR_BRUCE_RECEIVE", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=300_000, help="N per run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, modes alternating")
    add_run_args(parser)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        workdir, machine = open_run(stack, args)
        print_machine("pulsar-bruce reader placement bench", machine, args.set_qlen is not None)
        broker = Broker(workdir / "broker", 1)
        broker.start()
        stack.callback(broker.stop)
        runs = []
        for index in range(args.rounds):
            for mode in MODES if index % 2 == 0 else MODES[::-1]:
                run = run_once(workdir, broker, mode, args.messages, index)
                runs.append(run)
                print(
                    f"  round {index + 1} {mode:6}  {run['rate']:>9,.0f} msg/s  daemon "
                    f"{run['daemon_cpu_us']:5.2f} µs/datagram  "
                    f"{run['context_switches']:>7,} context switches",
                    flush=True,
                )
        print(f"median of {args.rounds} round(s), qlen {read_qlen()}, N = {args.messages:,}:")
        for mode in MODES:
            mine = [run for run in runs if run["mode"] == mode]
            print(
                f"  {mode:6}  {statistics.median(r['rate'] for r in mine):>9,.0f} msg/s  daemon "
                f"{statistics.median(r['daemon_cpu_us'] for r in mine):5.2f} µs/datagram  "
                f"{statistics.median(r['context_switches'] for r in mine):>9,.0f} "
                "context switches"
            )
        if args.json:
            import json

            args.json.write_text(json.dumps({"machine": machine, "runs": runs}, indent=1))
    print("no messages lost")
    return 0


if __name__ == "__main__":
    cli(main)
