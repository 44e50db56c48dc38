#!/usr/bin/env python3
"""The floor under any datagram daemon at a rate: ``python -m bench.read_floor``.

K paced ``to_pulsar.Sender`` processes (the senders of ``bench/many_senders.py``: the
same values, the same rate) send into ``bench/read_floor.c``, a C reader built with the
machine's ``cc`` that takes datagrams with ``recvmmsg`` after a nap (the daemon's read
linger) and does nothing with them. Its CPU per datagram is what the kernel charges a
reader at that rate, before any parsing, batching, compression or sending: the part of
the daemon's cost per message no daemon can shed (issue 37's 2 µs at 16,000 msg/s is
measured against it). One row per K, and a last row of one sender flat out (no rate),
for comparison. Per K it also runs the senders' side twice more: the paced loop alone
(sending nothing), and the loop with a bare ``socket.send`` of one prebuilt datagram
per message, so the senders' CPU splits into their loop, the system call from a process
that has just woken, and ``Sender.send``'s own work.

    python -m bench.read_floor                      # K = 16, 64; 16,000 msg/s in all; 200 B
    python -m bench.read_floor --senders 16 --seconds 3 --naps 2000,8000

Nothing is asserted on timing. Needs a C compiler (``cc``); exits 2 without one.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import BenchBase, BenchError
from bench.many_senders import POOL
from bench.payloads import KINDS

SOURCE = Path(__file__).with_name("read_floor.c")
#: The daemon's read linger at its default batch delay (``input/receive_policy.py``).
DEFAULT_NAP_US = 2000


def build_reader(workdir: Path) -> Path:
    """``read_floor.c`` compiled into ``workdir`` (BenchError without a compiler)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BenchError("no C compiler (cc): the floor reader cannot be built")
    binary = workdir / "read_floor"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(SOURCE)], check=True)
    return binary


class ReadFloor(BenchBase):
    """One row: K senders into a fresh floor reader."""

    def run_row(self, reader: Path, row: dict[str, Any], raw: bool = False) -> dict[str, Any]:
        """K senders (``raw``: a bare ``send`` of one prebuilt datagram in the same paced
        loop) into a fresh reader."""
        k, per, nap_us = row["senders"], row["per_sender"], row["nap_us"]
        total = k * per
        socket_path = self.workdir / f"floor-{k}-{nap_us}.sock"
        socket_path.unlink(missing_ok=True)  # the row before, with a bare send, used it
        with self.path(f"reader-k{k}").open("ab") as log:
            process = subprocess.Popen(
                [str(reader), str(socket_path), str(nap_us), str(total)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        try:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "READY":
                raise BenchError("the floor reader did not start (see its log)")
            common = {"topic": "floor", "messages": per, "size": row["size"], "keyed": False}
            common.update(socket=str(socket_path), payload=self.args.payload, pool=POOL)
            if row["rate"]:
                common.update(rate=row["rate"], raw=raw)
            params = [{**common, "seed": i, "seq_base": i * per} for i in range(k)]
            senders = self.start_workers("sender", params, f"sender-k{k}")
            started = time.monotonic()
            for worker in senders:
                worker.go()
            results = [w.result(timeout=self.args.seconds * 3 + 60) for w in senders]
            try:
                line = process.communicate(timeout=30)[0].split()
            except subprocess.TimeoutExpired:
                raise BenchError(f"the floor reader did not get all {total:,} datagrams") from None
        finally:
            process.kill()
        if len(line) != 5 or line[0] != "RESULT":
            raise BenchError(f"the floor reader ended without a result ({line})")
        got, wakes, user_s, system_s = int(line[1]), int(line[2]), float(line[3]), float(line[4])
        return {
            **row,
            "raw": raw,
            "datagrams": got,
            "wall_s": time.monotonic() - started,
            "reader_us": (user_s + system_s) / got * 1e6,
            "reader_system_us": system_s / got * 1e6,
            "wakeups_per_datagram": wakes / got,
            "senders_us": sum(r["cpu_s"] for r in results) / total * 1e6,
        }


def print_send_cost(row: dict[str, Any], loop_us: float, raw_us: float, sender_us: float) -> None:
    print(
        f"  K={row['senders']:>3} x {row['rate']:>8,.0f}/s senders, µs/msg: loop alone "
        f"{loop_us:.2f}; with a bare send of a prebuilt datagram {raw_us:.2f} "
        f"(+{raw_us - loop_us:.2f}); with Sender.send {sender_us:.2f} "
        f"(+{sender_us - raw_us:.2f} more)",
        flush=True,
    )


def print_row(out: dict[str, Any]) -> None:
    rate = f"{out['rate']:,.0f}/s" if out["rate"] else "flat out"
    print(
        f"  K={out['senders']:>3} x {rate:>10} x {out['size']} B, nap {out['nap_us']:>5} µs: "
        f"reader {out['reader_us']:5.2f} µs/datagram ({out['reader_system_us']:.2f} in the "
        f"kernel), {out['wakeups_per_datagram']:.3f} wake-ups/datagram; "
        f"senders {out['senders_us']:.2f} µs/msg",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with contextlib.ExitStack() as stack:
        workdir, machine = harness.open_run(stack, args)
        harness.print_machine("pulsar-bruce read floor", machine, bool(args.set_qlen))
        reader = build_reader(workdir)
        bench = ReadFloor(args, workdir)
        stack.callback(bench.kill_workers)
        results: dict[str, Any] = {"config": vars(args) | {"json": str(args.json)}, "rows": []}
        rows = [
            {"senders": k, "rate": args.total_rate / k, "nap_us": nap}
            for k in args.senders
            for nap in args.naps
        ]
        if args.flat_out:
            rows.append({"senders": 1, "rate": None, "nap_us": args.naps[0]})
        for row in rows:
            row["size"] = args.size
            rate = row["rate"] or args.flat_out_rate
            row["per_sender"] = max(1, int(rate * args.seconds))
            out = bench.run_row(reader, row)
            print_row(out)
            results["rows"].append(out)
            if args.send_cost and row["rate"] and row["nap_us"] == args.naps[0]:
                out["loop_us"] = bench.run_paced_loops(row, args.payload, POOL)["us_per_msg"]
                out["raw_send_us"] = bench.run_row(reader, row, raw=True)["senders_us"]
                print_send_cost(row, out["loop_us"], out["raw_send_us"], out["senders_us"])
            harness.write_json(args.json, results)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="K paced senders into a reader that only reads")

    def numbers(text: str) -> list[int]:
        return [int(x) for x in text.split(",")]

    parser.add_argument("--senders", type=numbers, default=[16, 64], help="K values (16,64)")
    parser.add_argument("--size", type=int, default=200, help="bytes per value (200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per row (default 10)")
    parser.add_argument(
        "--total-rate", type=float, default=16_000.0, help="msg/s of all K together (16000)"
    )
    parser.add_argument(
        "--naps", type=numbers, default=[DEFAULT_NAP_US], help="the reader's nap, µs (2000)"
    )
    parser.add_argument("--payload", choices=KINDS, default="json", help="values (json)")
    parser.add_argument(
        "--no-flat-out", dest="flat_out", action="store_false", help="skip the flat-out row"
    )
    parser.add_argument(
        "--no-send-cost",
        dest="send_cost",
        action="store_false",
        help="skip the senders' runs of the loop alone and of a bare send per message",
    )
    parser.add_argument(
        "--flat-out-rate",
        type=float,
        default=100_000.0,
        help="sizes the flat-out row: messages = this x --seconds (100000)",
    )
    harness.add_run_args(parser)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or min(args.senders) < 1 or args.size < 1 + 16 or min(args.naps) < 0:
        parser.error("--seconds must be > 0, --senders >= 1, --size >= 17, --naps >= 0")
    return args


if __name__ == "__main__":
    harness.cli(main)
